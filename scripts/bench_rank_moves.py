"""What keeping the moved entries for rank change would cost, in Redis and in a reader's copy.

    .venv/bin/python scripts/bench_rank_moves.py [--players 300000] [--changes 3000] [--reps 5]

Redis (a server of its own, started and stopped here): one board of ``--players`` entries in
layout 2's shape (6-byte ``reached_at`` + id members, ``reached_at`` in bucket hashes), then
snapshots of ``--changes`` changed entries, each one script call doing the publish script's
work per changed entry (``HGET`` the old ``reached_at``, ``HSET`` the new, ``ZREM`` the old
member, ``ZADD`` the new: ``lua/publish_boards.lua``) -- ``base`` -- or that and what the
publisher would add to keep the moves beside the snapshot (``ZSCORE`` of the old member, one
``HSET`` into the board's moves hash, emptied first) -- ``moves``. Alternating, ``--reps``
times each; Redis's CPU (``INFO cpu``) per changed entry, medians and ranges.

A reader's copy (``state.board_index.BoardIndex``, as the mirror applies a change set):
``upsert`` alone, and ``upsert`` plus ``state.board_moves.Moves.record``; process CPU per
change. And the answer: ``Moves.gained`` for an entry of a top, per entry.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import zlib

import redis

from rankflow.services import LocalRedis, free_port
from rankflow.state.board_index import BoardIndex, entry_key
from rankflow.state.board_moves import Moves

BUCKETS = 4096
BASE = """
for i = 1, #ARGV, 4 do
  local p, b, at, score = ARGV[i], KEYS[2] .. ':' .. ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local old = redis.call('HGET', b, p)
  if old ~= at then
    if old then redis.call('ZREM', KEYS[1], old .. p) end
    redis.call('HSET', b, p, at)
  end
  redis.call('ZADD', KEYS[1], score, at .. p)
end
return 1
"""
MOVES = """
redis.call('DEL', KEYS[3])
for i = 1, #ARGV, 4 do
  local p, b, at, score = ARGV[i], KEYS[2] .. ':' .. ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local old = redis.call('HGET', b, p)
  local was = old and redis.call('ZSCORE', KEYS[1], old .. p)
  redis.call('HSET', KEYS[3], p, was and (was .. ' ' .. old) or '')
  if old ~= at then
    if old then redis.call('ZREM', KEYS[1], old .. p) end
    redis.call('HSET', b, p, at)
  end
  redis.call('ZADD', KEYS[1], score, at .. p)
end
return 1
"""


def cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def at_bytes(t: int) -> bytes:
    return t.to_bytes(6, "big")


def fill(client: redis.Redis, players: int) -> dict[str, tuple[int, int]]:
    state: dict[str, tuple[int, int]] = {}
    pipe = client.pipeline(transaction=False)
    for i in range(players):
        player = f"p{i:07d}"
        score, at = random.randrange(10_000), 1_700_000_000_000 + random.randrange(10**9)
        state[player] = (score, at)
        pipe.zadd("board", {at_bytes(at) + player.encode(): -score})
        pipe.hset(f"r:{zlib.crc32(player.encode()) % BUCKETS}", player, at_bytes(at))
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    return state


def snapshot_args(state: dict[str, tuple[int, int]], changes: int) -> list[bytes | str | int]:
    args: list[bytes | str | int] = []
    for player in random.sample(sorted(state), changes):
        score, at = state[player]
        score, at = score + random.randrange(1, 100), at + random.randrange(1, 10**6)
        state[player] = (score, at)
        args += [player, zlib.crc32(player.encode()) % BUCKETS, at_bytes(at), -score]
    return args


def redis_side(players: int, changes: int, reps: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalRedis(free_port(), tmp).start()
        try:
            client = redis.Redis.from_url(server.url)
            state = fill(client, players)
            scripts = {"base": client.register_script(BASE), "moves": client.register_script(MOVES)}
            per_entry: dict[str, list[float]] = {"base": [], "moves": []}
            for rep in range(reps):
                for name in (("base", "moves") if rep % 2 == 0 else ("moves", "base")):
                    calls = [snapshot_args(state, changes) for _ in range(10)]
                    before = cpu(client)
                    for args in calls:
                        scripts[name](keys=["board", "r", "moves"], args=args)
                    per_entry[name].append((cpu(client) - before) / (10 * changes) * 1e6)
            client.close()
        finally:
            server.stop()
    return per_entry


def copy_side(players: int, changes: int, reps: int) -> dict[str, list[float]]:
    keys = {f"p{i:07d}": entry_key(f"p{i:07d}", random.randrange(10_000), random.randrange(10**9))
            for i in range(players)}
    index = BoardIndex.of(dict(keys), sorted(keys.values()))
    out: dict[str, list[float]] = {"upsert": [], "upsert+record": [], "gained": []}
    for rep in range(reps):
        for name in (("upsert", "upsert+record") if rep % 2 == 0 else ("upsert+record", "upsert")):
            batch = [(p, entry_key(p, random.randrange(10_000), random.randrange(10**9)))
                     for p in random.sample(sorted(keys), changes)]
            moves = Moves()
            started = time.process_time()
            if name == "upsert":
                for player, key in batch:
                    index.upsert(player, key)
            else:
                for player, key in batch:
                    moves.record(player, index.upsert(player, key), key)
            out[name].append((time.process_time() - started) / changes * 1e6)
        top = [(index.order[i], i) for i in range(100)]
        started = time.process_time()
        for key, rank0 in top:
            moves.gained(key[16:].decode(), key, rank0, index.below)
        out["gained"].append((time.process_time() - started) / len(top) * 1e6)
    return out


def summary(values: dict[str, list[float]]) -> dict[str, str]:
    return {name: f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for name, v in values.items()}


def paired(new: list[float], base: list[float]) -> str:
    """The median of the reps' ratios (each rep ran both, one after the other), with their range."""
    ratios = [n / b for n, b in zip(new, base)]
    return f"x{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=300_000)
    parser.add_argument("--changes", type=int, default=3_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    random.seed(args.seed)
    in_redis, in_copy = redis_side(args.players, args.changes, args.reps), copy_side(args.players, args.changes, args.reps)
    print(json.dumps({"redis_cpu_us_per_changed_entry": summary(in_redis),
                      "redis_moves_over_base": paired(in_redis["moves"], in_redis["base"]),
                      "copy_cpu_us_per_change": summary(in_copy),
                      "copy_record_over_upsert": paired(in_copy["upsert+record"], in_copy["upsert"]),
                      "players": args.players, "changes": args.changes, "reps": args.reps}))


if __name__ == "__main__":
    main()
