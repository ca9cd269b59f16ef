"""The capacity benchmark's control: an empty route answered by the same server path as the hot reads.

What a request costs the server before any of rankflow's code runs (a wake-up, a read, a
parse, a write through uvloop and uvicorn's protocol) is most of what one costs: the
application's own share of a route is its server CPU per request minus this route's, at
the same rate in the same run (``scripts/bench_capacity.py``, docs/benchmarks.md,
"Capacity of one serve process"). So the control is a :class:`PreparedRoute` like the
hot reads (``api.prepared``): matched, counted in ``/metrics`` and written by the
protocol as they are, with a constant ``{}`` body, and the same body through the ASGI
app's lean path when the protocol does not take the request (``api.hot_reads``).

It is mounted only when the environment asks for it (:data:`ENV` set to ``1``, which
only the benchmark does): a service in production has no such route (a ``404``).
"""

from __future__ import annotations

import os
from typing import Any

from rankflow.api.prepared import PreparedRoute

ENV = "RANKFLOW_BENCH_CONTROL"
PATH = "/_bench/empty"
BODY = b"{}"


def ready_empty(state: Any, params: tuple[str, ...], value: int | None) -> bytes:
    """The constant body: what a route costs that does nothing."""
    return BODY


async def answer_empty(state: Any, params: tuple[str, ...], value: int | None) -> bytes:
    return BODY


def control_routes(environ: dict[str, str] | None = None) -> list[PreparedRoute]:
    """The control route when :data:`ENV` is ``1`` in ``environ`` (the process's by default), else none."""
    env = os.environ if environ is None else environ
    return [PreparedRoute(PATH, None, None, ready_empty, answer_empty)] if env.get(ENV) == "1" else []
