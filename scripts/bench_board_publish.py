"""What the boards' Redis layout costs: the publisher alone, two boards of ``--players``.

Loads ``--players`` entries on two boards (``all`` and ``best``, the same players) in
snapshots of ``--chunk``, then publishes ``--updates`` snapshots of ``--update-size``
random players with a new score and ``reached_at``, through the flow's own publisher
(``Publisher``, ``BoardsState``). Prints one JSON line a run: Redis's CPU µs per entry
(load, updates), Redis's memory per entry, and this process's CPU µs per entry (building
and sending the calls: the flow's publisher thread). With ``--base PYTHON`` (another
checkout's interpreter) the two checkouts alternate ``--reps`` times on the same Redis,
each run starting from an empty Redis (``FLUSHALL``: use a Redis of its own).

    .venv/bin/python scripts/bench_board_publish.py --redis redis://127.0.0.1:6591/0 \\
        --base ../base/.venv/bin/python

``--layouts`` instead writes one board of ``--players`` in each candidate layout directly
(no publisher) and prints Redis's bytes per entry: the table of docs/design.md.

``--floor`` instead loads one board of ``--players`` new entries with plain pipelined
commands and no script (random scores and ``reached_at``, random ids): ``ZADD`` alone,
then ``ZADD`` plus each player's ``HSET`` into its bucket. What Redis spends per entry on
those is the least any script with this layout can cost while a board grows (the load
time of docs/design.md, "10M players on one board").
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import redis


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def one_run(url: str, players: int, chunk: int, updates: int, size: int) -> dict[str, float]:
    from rankflow.connectors.redis_boards import BoardsState
    from rankflow.connectors.redis_generations import join_run
    from rankflow.connectors.redis_keys import boards_namespace
    from rankflow.connectors.redis_publish import Publisher
    from rankflow.state.board_snapshot import BoardsSnapshot
    from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR

    client = redis.Redis.from_url(url)
    client.flushall()
    ns = boards_namespace("publish-bench")
    token, generation = join_run(client, ns, "publish-bench", fresh=True)
    publisher = Publisher(url, ns, token, generation, live=True, state=BoardsState())
    rng = random.Random(1)
    epoch = 0

    def publish(entries: dict[str, tuple[int, int]]) -> None:
        nonlocal epoch
        epoch += 1
        snap = BoardsSnapshot(snapshot_id=token * SNAPSHOT_ID_RUN_FACTOR + epoch, run=token, epoch=epoch,
                              positions={"bench/0": epoch}, dead_letters=0, k_max=100, boards={},
                              entries={("arena", "all"): entries, ("arena", "best"): entries}, dropped=[],
                              aliases={}, partition_lag_ms={}, errors=[])
        assert publisher.publish(snap) == 1

    day = 1798884000000
    base, cpu0, own0 = client.info("memory")["used_memory"], redis_cpu(client), time.process_time()
    for first in range(0, players, chunk):
        publish({f"p{i:07d}": (rng.randrange(0, 10001, 5), day + i) for i in range(first, min(players, first + chunk))})
    cpu1, own1, memory = redis_cpu(client), time.process_time(), client.info("memory")["used_memory"] - base
    for _ in range(updates):
        publish({f"p{rng.randrange(players):07d}": (rng.randrange(0, 10001, 5), day + players + rng.randrange(10**6))
                 for _ in range(size)})
    cpu2, own2 = redis_cpu(client), time.process_time()
    publisher.close()
    loaded, updated = 2 * players, 2 * updates * size  # entries (two boards)
    return {"redis_us_per_entry_load": round((cpu1 - cpu0) / loaded * 1e6, 2),
            "redis_us_per_entry_update": round((cpu2 - cpu1) / updated * 1e6, 2),
            "redis_bytes_per_entry": round(memory / loaded, 1),
            "publisher_us_per_entry_load": round((own1 - own0) / loaded * 1e6, 2),
            "publisher_us_per_entry_update": round((own2 - own1) / updated * 1e6, 2)}


LAYOUTS = ("decimal-one-hash", "decimal-buckets", "decimal-binary-values", "binary8-buckets", "binary6-buckets",
           "bare-ids")


def layout_bytes(url: str, layout: str, players: int) -> float:
    """Redis's memory per entry for one board of ``players`` written directly in ``layout``
    (the candidates of docs/design.md's layout decision; buckets of about 50 players)."""
    client = redis.Redis.from_url(url)
    client.flushall()
    base = int(client.info("memory")["used_memory"])
    rng, buckets = random.Random(1), max(1, players // 50)
    pipe = client.pipeline(transaction=False)
    for i in range(players):
        player, at, score = f"p{i:07d}".encode(), 1798884000000 + 7 * i, -rng.randrange(0, 10001, 5)
        decimal, six, eight = f"{at:015d}".encode(), at.to_bytes(6, "big"), at.to_bytes(8, "big")
        bucket = f"r:{zlib.crc32(player) % buckets}"
        prefix, value = {"decimal-one-hash": (decimal, decimal), "decimal-buckets": (decimal, decimal),
                         "decimal-binary-values": (decimal, six), "binary8-buckets": (eight, eight),
                         "binary6-buckets": (six, six), "bare-ids": (b"", b"")}[layout]
        pipe.zadd("z", {prefix + player: score})
        if layout == "decimal-one-hash":
            pipe.hset("r", player, value)
        elif layout != "bare-ids":
            pipe.hset(bucket, player, value)
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    return (int(client.info("memory")["used_memory"]) - base) / players


FLOORS = ("zadd", "zadd+hset")


def floor_run(url: str, mode: str, players: int, chunk: int = 5_000) -> dict[str, float]:
    """Redis's CPU µs and bytes per entry loading one board of ``players`` new entries with
    ``mode`` (:data:`FLOORS`), ``chunk`` entries a round trip, no script."""
    client = redis.Redis.from_url(url)
    client.flushall()
    rng, buckets = random.Random(1), max(1, players // 48)
    base, cpu0 = int(client.info("memory")["used_memory"]), redis_cpu(client)
    for first in range(0, players, chunk):
        pipe = client.pipeline(transaction=False)
        members = {}
        for _ in range(first, min(players, first + chunk)):
            player = f"u{rng.getrandbits(40):012x}".encode()
            at = (1798884000000 + rng.randrange(10**8)).to_bytes(6, "big")
            members[at + player] = -rng.randrange(0, 10001, 5)
            if mode == "zadd+hset":
                pipe.hset(f"r:{zlib.crc32(player) % buckets}", player, at)
        pipe.zadd("z", members)
        pipe.execute()
    return {"floor": mode, "players": players,
            "redis_us_per_entry": round((redis_cpu(client) - cpu0) / players * 1e6, 2),
            "redis_bytes_per_entry": round((int(client.info("memory")["used_memory"]) - base) / players, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis", required=True, help="a Redis of its own: every run empties it")
    ap.add_argument("--players", type=int, default=300_000)
    ap.add_argument("--chunk", type=int, default=20_000, help="entries per snapshot while loading")
    ap.add_argument("--updates", type=int, default=40)
    ap.add_argument("--update-size", type=int, default=3_000)
    ap.add_argument("--base", help="another checkout's python: alternate with it")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single run, for --base
    ap.add_argument("--layouts", action="store_true",
                    help="instead: Redis's bytes per entry of each candidate layout, one board of --players")
    ap.add_argument("--floor", action="store_true",
                    help="instead: Redis's CPU per entry of plain ZADD, and ZADD + HSET, one board of --players")
    args = ap.parse_args()
    if args.floor:
        for mode in FLOORS:
            print(json.dumps(floor_run(args.redis, mode, args.players)), flush=True)
        return
    if args.layouts:
        for layout in LAYOUTS:
            print(json.dumps({"layout": layout, "bytes_per_entry": round(layout_bytes(args.redis, layout,
                                                                                      args.players), 1)}))
        return
    shape = [str(x) for x in ("--players", args.players, "--chunk", args.chunk, "--updates", args.updates,
                              "--update-size", args.update_size)]
    if args.one or not args.base:
        print(json.dumps(one_run(args.redis, args.players, args.chunk, args.updates, args.update_size)))
        return
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    for _ in range(args.reps):
        for label, python in (("base", args.base), ("new", sys.executable)):
            out = subprocess.run([python, str(Path(__file__).resolve()), "--redis", args.redis, "--one", *shape],
                                 check=True, capture_output=True, text=True).stdout
            runs[label].append(json.loads(out))
            print(json.dumps({"checkout": label, **runs[label][-1]}), flush=True)
    for label, rows in runs.items():
        print(json.dumps({"checkout": label, "median": {k: statistics.median(r[k] for r in rows) for k in rows[0]}}))


if __name__ == "__main__":
    main()
