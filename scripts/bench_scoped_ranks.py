"""What a scoped ranks query costs (``POST /boards/{game}/{board}/ranks``, ``rankflow boards ranks``).

    .venv/bin/python scripts/bench_scoped_ranks.py [--players 300000] [--set 1000] [--reps 5]

A Redis of its own (started and stopped here) takes one board of ``--players`` entries through
the flow's own publisher (``Publisher``, ``BoardsState``), in snapshots of 5,000. Then, the
kinds alternating within each of ``--reps`` reps, 20 queries of each kind through the reader
the CLI uses (``BoardReader``): the ranks of a set of ``--set`` players (half on the board,
half not), the same players asked one by one (``player``), and a top 10. Redis CPU (``INFO
cpu``) and this process's CPU per query, medians (range). Then the memory index
(``api.board_mirror.BoardMirror``, loaded from that Redis): CPU per ranks query of the set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time

import redis
import redis.asyncio as aioredis

from rankflow.api.board_mirror import BoardMirror
from rankflow.connectors.board_read import BoardReader
from rankflow.connectors.redis_boards import BoardsState
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_keys import boards_namespace
from rankflow.connectors.redis_publish import Publisher
from rankflow.services import LocalRedis, free_port
from rankflow.state.board_snapshot import BoardsSnapshot
from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR

NAMESPACE = "ranks-bench"
CHUNK = 5_000
QUERIES = 20


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def load(url: str, players: int) -> None:
    client = redis.Redis.from_url(url)
    ns = boards_namespace(NAMESPACE)
    token, generation = join_run(client, ns, NAMESPACE, fresh=True)
    publisher = Publisher(url, ns, token, generation, live=True, state=BoardsState())
    rng = random.Random(1)
    day = 1798884000000
    for epoch, first in enumerate(range(0, players, CHUNK), start=1):
        entries = {f"p{i:07d}": (rng.randrange(0, 10001, 5), day + i) for i in range(first, min(players, first + CHUNK))}
        snap = BoardsSnapshot(snapshot_id=token * SNAPSHOT_ID_RUN_FACTOR + epoch, run=token, epoch=epoch,
                              positions={"bench/0": epoch}, dead_letters=0, k_max=100, boards={},
                              entries={("arena", "all"): entries}, dropped=[], aliases={}, partition_lag_ms={},
                              errors=[])
        assert publisher.publish(snap) == 1
    publisher.close()
    client.close()


def the_set(players: int, size: int, rng: random.Random) -> list[str]:
    on = [f"p{rng.randrange(players):07d}" for _ in range(size // 2)]
    return on + [f"x{rng.randrange(10**9)}" for _ in range(size - len(on))]


def redis_side(url: str, players: int, size: int, reps: int) -> dict[str, dict[str, list[float]]]:
    client = redis.Redis.from_url(url)
    reader = BoardReader(client, NAMESPACE)
    rng = random.Random(2)
    kinds = ("ranks", "players one by one", "top 10")
    out: dict[str, dict[str, list[float]]] = {k: {"redis_us": [], "client_us": []} for k in kinds}
    reader.top("arena", "all", 1)  # the script loaded, the generation learnt
    for rep in range(reps):
        order = kinds if rep % 2 == 0 else kinds[::-1]
        for kind in order:
            sets = [the_set(players, size, rng) for _ in range(QUERIES)]
            r0, c0 = redis_cpu(client), time.process_time()
            for s in sets:
                if kind == "ranks":
                    reader.ranks("arena", "all", s)
                elif kind == "top 10":
                    reader.top("arena", "all", 10)
                else:  # the players on the board (one not on it is an error each)
                    for p in s[:len(s) // 2]:
                        reader.player("arena", "all", p)
            c1, r1 = time.process_time(), redis_cpu(client)
            out[kind]["redis_us"].append((r1 - r0) / QUERIES * 1e6)
            out[kind]["client_us"].append((c1 - c0) / QUERIES * 1e6)
    client.close()
    return out


def mirror_side(url: str, players: int, size: int, reps: int) -> list[float]:
    async def loaded() -> BoardMirror:
        client = aioredis.Redis.from_url(url)
        mirror = BoardMirror(client, NAMESPACE, load_chunk=10_000)
        try:
            await mirror.load()
        finally:
            await client.aclose()
        return mirror

    mirror = asyncio.run(loaded())
    rng = random.Random(3)
    per_query = []
    for _ in range(reps):
        sets = [the_set(players, size, rng) for _ in range(QUERIES)]
        started = time.process_time()
        for s in sets:
            mirror.ranks("arena", "all", s)
        per_query.append((time.process_time() - started) / QUERIES * 1e6)
    return per_query


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=300_000)
    parser.add_argument("--set", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalRedis(free_port(), tmp).start()
        try:
            load(server.url, args.players)
            in_redis = redis_side(server.url, args.players, args.set, args.reps)
            in_mirror = mirror_side(server.url, args.players, args.set, args.reps)
        finally:
            server.stop()
    print(json.dumps({"per_query_us": {kind: {side: summary(v) for side, v in sides.items()}
                                       for kind, sides in in_redis.items()},
                      "mirror_ranks_us": summary(in_mirror),
                      "players": args.players, "set": args.set, "reps": args.reps}))


if __name__ == "__main__":
    main()
