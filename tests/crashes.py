"""Crashing a flow on purpose: kill -9 while it publishes."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable


def kill_9_while_publishing(command: list[str], progress: Callable[[], int], rng: random.Random, times: int,
                            total: int, ready: Callable[[], bool] | None = None) -> int:
    """Start ``command`` up to ``times`` times and SIGKILL each execution once the published
    ``progress`` (messages or lines behind the latest snapshot) passes a random point of its
    share of 5-70% of ``total``: the i-th kill in the i-th of ``times`` equal slices, so each
    lands mid-run at a moment the seed picks, and after the execution published past where the
ones before it got (the last one may have passed this one's point already). A condition, never a pause: on a fast machine a
    pause could outlast the whole run. ``ready``: a condition the first kill waits for too
    (e.g. a state on disk the resume must start from). Returns how many kills landed (an
    execution that finished first ends the series)."""
    kills = 0
    share = 0.65 / times
    for i in range(times):
        target = total * (0.05 + share * (i + rng.random()))
        before = progress()  # where the executions before this one got: it must publish past it
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120  # a guard against a hung execution, not a timing
        while ((now := progress()) < target or now <= before or (kills == 0 and ready is not None and not ready())) \
                and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    return kills
