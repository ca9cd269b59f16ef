"""An open-loop HTTP load generator: requests at a fixed rate, latency from when each was due.

Requests are due at ``start + i / rate``; ``connections`` keep-alive connections take
them in turn. Latency is measured from the due time, not the send time, so a server
that falls behind is charged for the queue it causes (no coordinated omission).
Plain asyncio streams and HTTP/1.1: light enough to load a local server at a few
thousand requests per second from a Python process.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rankflow.bench.rig import percentile


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def percentile(self, q: float) -> float:
        value = percentile(self.latencies, q)
        return float("nan") if value is None else value

    def summary(self) -> dict[str, float]:
        return {"requests": self.requests, "errors": self.errors, "rps": self.requests / self.seconds,
                "p50_ms": self.percentile(0.5) * 1000, "p99_ms": self.percentile(0.99) * 1000,
                "max_ms": max(self.latencies, default=float("nan")) * 1000}


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def run_load(host: str, port: int, path_for: Callable[[int], str], rate: float, seconds: float,
                   connections: int = 32) -> LoadResult:
    result = LoadResult()
    total = int(rate * seconds)
    counter = itertools.count()
    start = time.perf_counter() + 0.1

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while (i := next(counter)) < total:
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    status = await _request(reader, writer, path_for(i))
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    result.errors += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                    continue
                result.latencies.append(time.perf_counter() - due)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                result.requests += 1
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    result.seconds = time.perf_counter() - start
    return result
