"""Waiting on a condition, never for a time: ``wait_for`` asks again until the answer is the one expected."""

from __future__ import annotations

import time
from typing import Any


def wait_for(fetch: Any, ok: Any, timeout: float = 60.0) -> Any:
    """``fetch()`` until ``ok`` of it (the service follows a publish within its poll interval); the
    answer that was ok. Fails, naming the last answer, after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ok(got := fetch()):
        assert time.monotonic() < deadline, f"never: {getattr(got, 'body', got)!r}"
        time.sleep(0.01)
    return got
