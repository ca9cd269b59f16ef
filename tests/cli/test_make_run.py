"""``make run`` end to end: the same top 10 every time, and the services of ``make services-start`` left alone.

``make run`` starts a Redis and a broker of its own on free ports, so neither an earlier run nor
services left running (here on free ports, in a private ``LOCAL``, with a topic named like
``make run``'s and holding other events) can change its answer, and it stops only what it started.
A small log (``EVENTS``) keeps each run to seconds; ``DATA`` keeps the checkout's ``data/`` untouched.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from rankflow.services import LocalRedis, LocalTansu, free_port

pytestmark = [pytest.mark.redis, pytest.mark.broker]  # `make run` and `make services-start` start both
ROOT = Path(__file__).resolve().parents[2]
RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
ROW = re.compile(r"^│\s*(\d+)\s*│\s*(\S+)\s*│\s*([\d,]+)\s*│$")  # counts print as 2,555


def make(*args: str) -> subprocess.CompletedProcess:
    """``make`` in the checkout as a user types it: not as a sub-make of ``make test``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"make {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def top10(output: str) -> list[tuple[int, str, int]]:
    """The rows of the table ``rankflow top --k 10`` printed (its header line has a timestamp)."""
    rows = [(int(m[1]), m[2], int(m[3].replace(",", ""))) for m in map(ROW.match, output.splitlines()) if m]
    assert len(rows) == 10, output[-3000:]
    return rows


def test_make_run_same_top10_every_time_and_prestarted_services_untouched(tmp_path: Path) -> None:
    local, data = tmp_path / "local", tmp_path / "data"
    run = ("run", "EVENTS=5000", f"LOCAL={local}", f"DATA={data}")
    first = top10(make(*run).stdout)
    assert top10(make(*run).stdout) == first

    ports = (f"REDIS_PORT={free_port()}", f"KAFKA_PORT={free_port()}", f"LOCAL={local}")
    make("services-start", *ports)
    redis = LocalRedis(int(ports[0].split("=")[1]), local / "redis")
    tansu = LocalTansu(int(ports[1].split("=")[1]), local / "tansu")
    try:
        # the running broker already holds a topic named like make run's, with another log on 2 partitions
        other = tmp_path / "other.jsonl"
        subprocess.run([*RANKFLOW, "generate", "--users", "300", "--songs", "5", "--events", "3000", "--seed", "7",
                        "--out", str(other)], check=True, capture_output=True, timeout=120)
        subprocess.run([*RANKFLOW, "produce", "--input", str(other), "--kafka", f"{tansu.url}/playback-events",
                        "--partitions", "2"], check=True, capture_output=True, timeout=120)

        assert top10(make(*run, *ports[:2]).stdout) == first

        assert redis.running() and redis.ready() and tansu.running() and tansu.ready()
        topics = AdminClient({"bootstrap.servers": tansu.url}).list_topics(timeout=10).topics
        assert len(topics["playback-events"].partitions) == 2
    finally:
        make("services-stop", f"LOCAL={local}")
    assert not redis.running() and not tansu.running()
    assert sorted(p.name for p in local.iterdir()) == ["redis", "tansu"]  # each run removed its own folder
