"""Crashing a flow on purpose: kill -9 while it publishes."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable


def kill_9_while_publishing(command: list[str], progress: Callable[[], int], rng: random.Random, times: int,
                            max_pause_s: float) -> int:
    """Start ``command`` up to ``times`` times; each time wait until it publishes (``progress``
    grows), wait a random moment more, and SIGKILL it. Returns how many kills landed (an
    execution that finished first ends the series)."""
    kills = 0
    for _ in range(times):
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        before = progress()
        deadline = time.monotonic() + 60
        while progress() <= before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # wait until this execution publishes: the kill lands mid-run
        time.sleep(rng.uniform(0.0, max_pause_s))
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    return kills
