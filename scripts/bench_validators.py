"""What the cache validators cost a rank's answer: ``HttpCache.of_body`` per new target, before and
after the HTTP date is made once per snapshot (``api.http_cache.http_date``), in one process.

    .venv/bin/python scripts/bench_validators.py [--calls 50000] [--rounds 5]

A player's rank is a new request target almost every time (one player of many), so its
validators are made per request: a digest of the target, the tag, and the ``Last-Modified``
date. Before, the date was formatted for each target (``email.utils.formatdate``); after, once
per ``published_at``. Rounds alternate (before, after, ...) and the CPU time per call
(``time.process_time``) of each is printed, then the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from email.utils import formatdate

from rankflow.api import http_cache


def per_call_us(calls: int, players: int = 50_000) -> float:
    cache = http_cache.HttpCache(1, [])
    published_at = 1_796_435_947_332
    started = time.process_time()
    for i in range(calls):
        player = b"p%07d" % (i % players)
        body = (b'{"snapshot_id":1000000016,"published_at":%d,"age_ms":12,"game_id":"arena","board":"all",'
                b'"player_id":"%s","score":4000,"rank":5,"competition_rank":6}' % (published_at, player))
        cache.of_body(b"/boards/arena/all/players/" + player, body, "/boards/arena/all/players/x", None)
    return (time.process_time() - started) * 1e6 / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    after = http_cache.http_date

    def before(published_at: int) -> bytes:  # the code before: formatted for every target
        return formatdate(published_at / 1000, usegmt=True).encode()

    runs: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(a.rounds):
        for name, date in (("before", before), ("after", after)):
            http_cache.http_date = date  # type: ignore[assignment]  # Validators looks it up per call
            runs[name].append(per_call_us(a.calls))
    http_cache.http_date = after  # type: ignore[assignment]
    for name, values in runs.items():
        print(f"{name}: {statistics.median(values):.2f} us per new target ({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
