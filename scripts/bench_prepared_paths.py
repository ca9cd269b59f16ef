"""What the prepared answers cost in-process, route by route and part by part: before and after a change.

    .venv/bin/python scripts/bench_prepared_paths.py [--players 50000] [--calls 20000] [--reps 5]
        [--base-python OTHER/.venv/bin/python]

The server's CPU per request (``scripts/bench_capacity.py``) is a wake-up, a read, a parse and a
write (about 60-100 us on this machine) plus the application's share, found as a difference of
two such figures: a few microseconds move inside their noise. This measures the application's
share alone, in one process, with the CPU clock (``time.process_time``): the route's
:class:`api.prepared.PreparedAnswers` reply for ``GET /_bench/empty`` (the capacity benchmark's
control), ``GET /boards/arena/all/top?n=100``, ``GET /boards/arena/all/players/{a random one of
--players}`` (a new target nearly every call, as under load) and ``GET /rankings?k=100``, whole
and by part: matching the path, the route's ``ready`` (the body), the cache validators
(``api.http_cache``), the counting, and the head the protocol joins (uvicorn's default headers).
A route with ``validated`` (the body and its validators in one call: a player's rank) has that
call under "ready" and nothing under "validators".

The boards come from a real Redis (a board of ``--players`` players published by ``rankflow run
--flow boards``, loaded into ``api.board_mirror``); the listener ranking is a snapshot of 100
songs made here (its answer is cut from a document: what Redis holds does not change it).

``--base-python``: the same measurement by another checkout's interpreter (the code before a
change), on the same Redis, alternated with this one rep by rep: a before/after pair. Prints
microseconds per call, medians of the reps, and writes ``bench-results/prepared-paths.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NS = "paths"
KEY = hashlib.sha256(b"rankflow prepared paths").digest()
PARTS = ("match", "ready", "validators", "count", "head", "reply")


def publish(redis_url: str, work: Path, players: int) -> None:
    """A board of ``players`` players (one result each), published by this checkout's flow."""
    from rankflow.bench.boards.logs import one_result_per_player

    log = work / "scores.jsonl"
    one_result_per_player(log, players, KEY, 1)
    subprocess.run([sys.executable, "-m", "rankflow.cli", "run", "--flow", "boards", "--input", f"jsonl:{log}",
                    "--until-eof", "--redis", redis_url, "--namespace", NS, "--signing-key", KEY.hex(),
                    "--dead-letter", f"jsonl:{work / 'dead.jsonl'}"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


async def app_state(redis_url: str) -> Any:
    """What the prepared routes read of ``app.state``: the mirror loaded, the shared tops, a listener snapshot."""
    import redis.asyncio as aioredis

    from rankflow.api import shared_cache
    from rankflow.api.board_mirror import BoardMirror, MirroredBoards
    from rankflow.api.rankings import BodyCache
    from rankflow.connectors.board_read import AsyncBoardReader

    client = aioredis.Redis.from_url(redis_url)
    mirror = BoardMirror(client, NS)
    await mirror.load()
    assert mirror.ready, mirror.problem
    settings = SimpleNamespace(stale_after_ms=10**9)
    boards = MirroredBoards(mirror, AsyncBoardReader(client, NS))
    try:  # after: the mirror's tops at hand (an older checkout has no such parameter)
        tops = shared_cache.SharedTops(boards, mirror, stale_after_ms=settings.stale_after_ms, at_hand=mirror.top_at_hand)
    except (TypeError, AttributeError):
        tops = shared_cache.SharedTops(boards, mirror, stale_after_ms=settings.stale_after_ms)
    await tops.top_bytes("arena", "all", 100)  # encoded once for the snapshot, as the first request would
    now = int(time.time() * 1000)
    snap = {"snapshot_id": 7, "published_at": now, "positions": {"0": 10}, "total_listeners": 5050, "k_max": 100,
            "items": [{"rank": i + 1, "song_id": f"song_{i:03d}", "listeners": 100 - i} for i in range(100)]}
    return SimpleNamespace(boards=boards, board_mirror=mirror, board_changes=mirror, board_tops=tops,
                           settings=settings, cache=SimpleNamespace(snapshot=snap, fresh=True), bodies=BodyCache())


def measure(redis_url: str, calls: int, players: int) -> dict[str, dict[str, float]]:
    """µs per call of each route and part, in this interpreter's checkout."""
    from rankflow.api import bench_control, boards, rankings, server
    from rankflow.api.app import ApiMetrics
    from rankflow.api.http_cache import HttpCache
    from rankflow.api.prepared import PreparedAnswers

    from rankflow.execution import tune_gc

    state = asyncio.run(app_state(redis_url))
    tune_gc()  # as rankflow serve does
    cache = HttpCache(1, [*boards.CACHEABLE, *rankings.CACHEABLE] if hasattr(rankings, "CACHEABLE") else boards.CACHEABLE)
    os.environ[bench_control.ENV] = "1"
    prepared = PreparedAnswers(state, [*boards.PREPARED, *rankings.PREPARED, *bench_control.control_routes()], {},
                               ApiMetrics(), cache)
    digits = max(7, len(str(players - 1)))
    ids = [f"p{i:0{digits}d}" for i in range(players)]
    random.Random(1).shuffle(ids)
    defaults = [(b"date", b"Sat, 05 Dec 2026 05:00:00 GMT"), (b"server", b"uvicorn")]

    def head(status: bytes, rest: bytes, body: bytes | None = None) -> Any:
        """What the protocol hands its transport (after: a head and a large body apart)."""
        joined = getattr(server, "_joined_defaults", None)
        if joined is not None:  # after: joined once per list of defaults
            head = status + joined(defaults) + rest
            return (head, body) if len(body or b"") > getattr(server, "JOIN_BELOW", 0) else head + (body or b"")
        parts = [status]  # before: joined per answer
        for name, value in defaults:
            parts += (name, b": ", value, b"\r\n")
        parts.append(rest)
        return b"".join(parts)

    routes = {"control": lambda i: (bench_control.PATH, b""),
              "top 100": lambda i: ("/boards/arena/all/top", b"n=100"),
              "rank": lambda i: (f"/boards/arena/all/players/{ids[i % players]}", b""),
              "rankings k=100": lambda i: ("/rankings", b"k=100")}
    return {name: parts_of(prepared, cache, state, [request(i) for i in range(calls)], head)
            for name, request in routes.items()}


def parts_of(prepared: Any, cache: Any, state: Any, requests: list[tuple[str, bytes]], head: Any) -> dict[str, float]:
    """µs per call of each part of ``requests``' prepared answers, and of the whole."""
    calls = len(requests)
    targets = [(path.encode() + b"?" + query) if query else path.encode() for path, query in requests]
    one_reply = prepared.reply(*requests[0], None, targets[0])
    assert one_reply is not None, f"{requests[0]}: not prepared"
    found = [prepared.match(path, query) for path, query in requests]
    bodies = [f[0].route.ready(state, f[1], f[2]) for f in found]
    matcher = found[0][0]
    status = 0 if hasattr(matcher, "pending") else matcher.count  # after: 0 (a 200); before: its counter
    validated = getattr(matcher.route, "validated", None)  # after: the body and validators in one call
    parts: dict[str, Any] = {
        "match": lambda: [prepared.match(path, query) for path, query in requests],
        "ready": lambda: [f[0].route.ready(state, f[1], f[2]) for f in found] if validated is None else [
            validated(state, f[1], f[2], t, cache.control) for f, t in zip(found, targets)],
        "validators": lambda: [] if validated is not None else [
            cache.of_body(t, b, p, state) for t, b, (p, _) in zip(targets, bodies, requests)],
        "count": lambda: [prepared._count(matcher, status, 0.0) for _ in range(calls)],
        "head": lambda: [head(*one_reply) for _ in range(calls)],
        "reply": lambda: [head(*prepared.reply(path, query, None, t)) for (path, query), t in zip(requests, targets)],
    }
    out = {}
    for part, run in parts.items():
        cache._by_target = {}  # every part starts as the run does: no target's validators kept
        started = time.process_time()
        run()
        out[part] = (time.process_time() - started) * 1e6 / calls
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=50_000)
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--base-python", metavar="PATH", help="another checkout's .venv/bin/python: the code before")
    p.add_argument("--out", default=str(ROOT / "bench-results"))
    p.add_argument("--measure", metavar="REDIS_URL", help=argparse.SUPPRESS)  # one run, in a child process
    a = p.parse_args()
    if a.measure:
        print(json.dumps(measure(a.measure, a.calls, a.players)))
        return 0
    sys.path.insert(0, str(ROOT))
    from rankflow.services import LocalRedis, free_port

    work = Path(tempfile.mkdtemp(prefix="rankflow-paths-"))
    rds = LocalRedis(free_port(), work / "redis").start()
    sides = {"after": sys.executable, **({"before": a.base_python} if a.base_python else {})}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {side: [] for side in sides}
    try:
        publish(rds.url, work, a.players)
        for rep in range(a.reps):
            order = list(sides.items()) if rep % 2 == 0 else list(reversed(sides.items()))
            for side, python in order:  # alternated: each pair shares the machine's minute
                cwd = ROOT if side == "after" else Path(python).absolute().parent.parent.parent
                done = subprocess.run([python, str(Path(__file__).resolve()), "--measure", rds.url, "--calls",
                                       str(a.calls), "--players", str(a.players)], cwd=cwd, capture_output=True,
                                      text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{side}: {done.stderr.strip()[-2000:]}")
                runs[side].append(json.loads(done.stdout.splitlines()[-1]))
                print(f"rep {rep + 1} {side}: " + ", ".join(f"{route} {r['reply']:.2f}" for route, r in
                                                            runs[side][-1].items()), flush=True)
    finally:
        rds.stop()
    medians = {side: {route: {part: statistics.median(r[route][part] for r in reps) for part in PARTS}
                      for route in reps[0]} for side, reps in runs.items()}
    print("\nus per call, CPU, medians of", a.reps, "reps")
    print(f"{'route':16} {'side':7} " + " ".join(f"{part:>10}" for part in PARTS))
    for route in medians["after"]:
        for side in medians:
            print(f"{route:16} {side:7} " + " ".join(f"{medians[side][route][part]:10.2f}" for part in PARTS))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prepared-paths.json").write_text(json.dumps({"command": " ".join(sys.argv), "runs": runs,
                                                         "medians": medians}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
