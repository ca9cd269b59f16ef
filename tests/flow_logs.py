"""A small log of each flow, for the tests that run every flow the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rankflow.generate import generate
from rankflow.generate_messages import generate_messages
from rankflow.generate_scores import generate_scores

LOGS: dict[str, Callable[[Path], object]] = {
    "listeners": lambda out: generate(users=300, songs=40, events=3_000, seed=9, out=out),
    "boards": lambda out: generate_scores(players=200, games=2, events=2_000, seed=9, out=out),
    "activity": lambda out: generate_messages(2_000, seed=9, out=out),
}
"""Per flow (``options.FLOWS``), a writer of a small log with the generator's chaos."""
