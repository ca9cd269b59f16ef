"""What the ``board_changes`` stream costs the boards' publish script, on a 1M-member board.

Starts a Redis of its own, fills one board with ``--players`` members, then runs
snapshots of ``--entries`` entries each through the publish script as it was before
the stream (from git: ``--before``, a commit) and as it is now, alternately, on the
same board; Redis's slow log (threshold 0) gives each call's own duration.

    .venv/bin/python scripts/measure_board_changes.py --before a639013~1
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import tempfile
from pathlib import Path

import orjson
import redis

from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_scripts import PUBLISH_BOARDS_LUA
from rankflow.services import LocalRedis, free_port


def old_script(commit: str) -> str:
    source = subprocess.run(["git", "show", f"{commit}:connectors/redis_scripts.py"], check=True,
                            capture_output=True, text=True).stdout
    scope: dict[str, object] = {}
    exec(compile(source, "old_redis_scripts", "exec"), scope)  # noqa: S102 - our own file from git
    return str(scope["PUBLISH_BOARDS_LUA"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a commit whose PUBLISH_BOARDS_LUA has no stream")
    ap.add_argument("--players", type=int, default=1_000_000)
    ap.add_argument("--entries", type=int, default=2_000)
    ap.add_argument("--calls", type=int, default=40, help="calls of each script")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        service = LocalRedis(free_port(), Path(tmp)).start()
        try:
            measure(redis.Redis.from_url(service.url), old_script(args.before), args)
        finally:
            service.stop()


def measure(client: redis.Redis, before: str, args: argparse.Namespace) -> None:
    k = Keys("m:boards")
    name = orjson.dumps(["arena", "all"])
    zset, hashed = k.board("arena", "all")
    rng = random.Random(1)
    new_sha, old_sha = client.script_load(PUBLISH_BOARDS_LUA), client.script_load(before)
    state = {"sid": 0}

    def call(sha: str, entries: dict[str, list[int]], with_stream: bool) -> None:
        state["sid"] += 1
        sid = state["sid"]
        head = [k.generation, k.owner, k.snapshot_id, k.snapshot, k.positions, k.stream, k.runs, k.aliases, k.boards]
        keys = [*head, k.board_changes, zset, hashed] if with_stream else [*head, zset, hashed]
        argv = [1, 0, sid, b"{}", 10, "live", 1, "f", sid, "full" if sid == 1 else "delta"]
        argv += ([100, 1 << 20] if with_stream else []) + [1, 0, 0, name, orjson.dumps(entries)]
        client.evalsha(sha, len(keys), *keys, *argv)

    digits = len(str(args.players - 1))
    for start in range(0, args.players, 50_000):
        call(new_sha, {f"p{i:0{digits}d}": [rng.randrange(100_000), rng.randrange(10**12)]
                       for i in range(start, min(start + 50_000, args.players))}, True)
    print(f"board of {client.zcard(zset):,} members")
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 10_000)
    durations: dict[str, list[int]] = {"before": [], "after": []}
    for _ in range(args.calls):
        for label, sha, stream in (("before", old_sha, False), ("after", new_sha, True)):
            entries = {f"p{rng.randrange(args.players):0{digits}d}": [rng.randrange(100_000), rng.randrange(10**12)]
                       for _ in range(args.entries)}
            client.slowlog_reset()
            call(sha, entries, stream)
            durations[label].append(max(e["duration"] for e in client.slowlog_get(100)
                                        if b"EVALSHA" in e["command"].upper()[:8]))
    for label, d in durations.items():
        print(f"{label:6}: median {statistics.median(d) / 1000:.2f} ms per call of {args.entries:,} entries "
              f"({statistics.median(d) / args.entries:.2f} µs per entry), mean {statistics.mean(d) / 1000:.2f} ms")
    info = client.xinfo_stream(k.board_changes)
    print(f"stream: {info['length']} entries, {client.memory_usage(k.board_changes):,} bytes")


if __name__ == "__main__":
    main()
