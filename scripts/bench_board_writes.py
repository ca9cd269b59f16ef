"""What Redis spends per changed board entry, today's layout against the tie-break in the score.

    .venv/bin/python scripts/bench_board_writes.py [--players 1000000,100000,10000] [--reps 3]
        [--snapshots 150] [--entries 700]

Issue 41, item 2: an entry costs Redis some 10.5 µs in layout 2 (the old member found through
the board's ``reached_at`` bucket, then ``ZREM``, ``ZADD``, ``HSET``), a bare in-place ``ZADD``
some 4. This script starts its own Redis servers (``rankflow.services.LocalRedis``), one per
variant, loads the same boards into each (three games of ``--players`` players: ``all`` and
``best`` hold every player, the current week 40% of them, the current day 15%), then replays
the same stream of entry updates through each, alternating variants ``--reps`` times (each rep
``--snapshots`` snapshots of ``--entries`` entries: 90% a player already there whose score
rises, 10% a new one, as the rules make them). Variants:

- ``layout2``: today's publish script and layout, through the flow's own publisher
  (``Publisher``, ``BoardsState``);
- ``layout3``: the same prelude and stream, each board's loop replaced: ``best``,
  ``daily:*`` and ``weekly:*`` entries are one ``ZADD`` of the bare player id, the score a
  double whose bit pattern is the order key (:func:`order_key`, docs/design.md), computed by
  the publisher and sent as the ``ZADD``'s arguments (after the entries' JSON, which the
  stream keeps); ``all``, whose key does not fit, as today;
- ``zadd``: the floor, no script: one pipelined ``ZADD`` of bare ids per board with the same
  scores (``all`` too, as if its key fitted);
- ``stream``: design (a)'s Redis floor: the same script keeping only the ``board_changes``
  stream and the boards' set (the boards themselves held elsewhere; a top K not kept).

- ``layout3j``: ``layout3`` with each board's scores as one JSON object (player -> score)
  instead of flat arguments;

Prints per rep and variant Redis's CPU seconds (``INFO cpu``: ``used_cpu_sys`` +
``used_cpu_user``) per 1M entries (and this process's CPU µs an entry: building and sending
the calls, the flow's publisher's share), then the medians and the ratios to ``layout2``. With
``--check`` it then compares every board of ``layout3`` with ``layout2``'s, entry by entry in
order (decoded), and exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import random
import statistics
import struct
import sys
import tempfile
import time
import zlib
from typing import Any

import orjson
import redis

from rankflow.connectors.board_layout import BUCKET_LOAD, LAYOUT, REACHED_BYTES, member, member_fields
from rankflow.connectors.redis_boards import BoardsState, board_name
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_publish import Publisher
from rankflow.connectors.scripts import PUBLISH_BOARDS, Script, piece
from rankflow.services import LocalRedis, free_port
from rankflow.state.board_snapshot import BoardsSnapshot
from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR

DAY_MS = 86_400_000
DAY0 = int(dt.datetime(2027, 1, 6, tzinfo=dt.UTC).timestamp() * 1000)  # a Wednesday of ISO week 2027-W01
WEEK0 = DAY0 - 2 * DAY_MS  # Monday 2027-01-04
DAILY, WEEKLY = "daily:2027-01-06", "weekly:2027-W01"
BOARDS = ("all", "best", WEEKLY, DAILY)

TIME_BITS = {"best": 48, "daily": 27, "weekly": 30, "all": 48}
"""Bits of ``reached_at`` in the key: ``best`` any time below 2^48, a day's 86,400,000 ms below
2^27, a week's 604,800,000 below 2^30 (offsets from the period's start)."""


def points_cap(kind: str) -> int:
    """The greatest score a board of ``kind`` can encode: keys stay below the bit pattern of
    +inf (2047 * 2^52), so every key is a finite, non-negative double. ``best`` needs 10,000;
    ``all`` could hold only 32,751 (what the ``zadd`` floor pretends)."""
    return 10_000 if kind == "best" else 2047 * 2 ** (52 - TIME_BITS[kind]) - 1


def kind_of(board: str) -> str:
    return board.partition(":")[0]


def origin_of(board: str) -> int:
    return {"daily": DAY0, "weekly": WEEK0}.get(kind_of(board), 0)


def order_key(board: str, score: int, reached_at: int) -> int:
    """The 63-bit key ordering a board as docs/semantics/boards.md 4 (ascending: the best first;
    equal keys order by member, the player id): the score's complement, then the time."""
    kind = kind_of(board)
    return (points_cap(kind) - score) << TIME_BITS[kind] | (reached_at - origin_of(board))


def key_double(key: int) -> float:
    """The double whose bit pattern is ``key``: non-negative doubles order as their patterns."""
    return float(struct.unpack(">d", struct.pack(">Q", key))[0])


def key_of_double(score: float) -> int:
    return int(struct.unpack(">Q", struct.pack(">d", score))[0])


LAYOUT3_BODY = r"""
local boards = tonumber(ARGV[P + 4])
local dropped = tonumber(ARGV[P + 5])
redis.call('DEL', KEYS[#KEYS])
local a = P + 7
local size = 0
local aliases = {}
local function in_batches(command, key, list)
  for i = 1, #list, 4000 do
    redis.call(command, key, unpack(list, i, math.min(i + 3999, #list)))
  end
end
local function grow(z, r, coming)
  local n, low = bucket_span(r)
  local before = n
  local card = redis.call('ZCARD', z) + coming
  while card > LOAD * n do
    local split = n - low
    local from, to = r .. ':' .. split, r .. ':' .. (split + low)
    local flat = redis.call('HGETALL', from)
    local moved, gone = {}, {}
    for i = 1, #flat, 2 do
      if crc32(flat[i]) % (2 * low) == split + low then
        moved[#moved + 1], moved[#moved + 2] = flat[i], flat[i + 1]
        gone[#gone + 1] = flat[i]
      end
    end
    if #gone > 0 then
      redis.call('HSET', to, unpack(moved))
      redis.call('HDEL', from, unpack(gone))
    end
    n = n + 1
    if n == 2 * low then
      low = 2 * low
    end
  end
  if n ~= before then
    redis.call('SET', r, n)
  end
  return n, low
end
for i = 1, tonumber(ARGV[a]) do
  redis.call('HSET', KEYS[9], ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
  aliases[2 * i - 1], aliases[2 * i] = ARGV[a + 2 * i - 1], ARGV[a + 2 * i]
end
a = a + 1 + 2 * tonumber(ARGV[a])
local hashes = cjson.decode(ARGV[a])
a = a + 1
local changed = {}
for b = 1, boards do
  local z, r = KEYS[11 + 2 * b], KEYS[12 + 2 * b]
  redis.call('SADD', KEYS[10], ARGV[a])
  changed[2 * b - 1], changed[2 * b] = ARGV[a], ARGV[a + 1]
  size = size + #ARGV[a + 1]
  local count = tonumber(ARGV[a + 2])
  if ARGV[a + 3] == '1' then  -- the scores and ids to ZADD follow, the score's double from the flow
    for i = a + 4, a + 3 + 2 * count, 4000 do
      redis.call('ZADD', z, unpack(ARGV, i, math.min(i + 3999, a + 3 + 2 * count)))
    end
    a = a + 4 + 2 * count
  elseif ARGV[a + 3] == '2' then  -- one JSON object: player -> the score's double
    local adds = {}
    for player, score in pairs(cjson.decode(ARGV[a + 4])) do
      adds[#adds + 1], adds[#adds + 2] = score, player
    end
    in_batches('ZADD', z, adds)
    a = a + 5
  else
    local n, low = grow(z, r, count)
    local adds, removes = {}, {}
    for player, e in pairs(cjson.decode(ARGV[a + 1])) do
      local at = struct.pack('>I6', e[2])
      local bucket = bucket_key(r, hashes[player], n, low)
      local old = redis.call('HGET', bucket, player)
      if old ~= at then
        if old then
          removes[#removes + 1] = old .. player
        end
        redis.call('HSET', bucket, player, at)
      end
      adds[#adds + 1], adds[#adds + 2] = -e[1], at .. player
    end
    in_batches('ZREM', z, removes)
    in_batches('ZADD', z, adds)
    a = a + 4
  end
end
redis.call('XADD', KEYS[11], 'MAXLEN', '~', ARGV[P + 2], '*', 'snapshot_id', ARGV[3], 'published_at', ARGV[8],
           'previous', previous or '', 'full', 'delta', 'aliases', #aliases > 0 and cjson.encode(aliases) or '[]',
           'boards', '[' .. table.concat(changed, ',') .. ']', 'dropped', '[]')
return 1
"""
"""Layout 3's board loop (a prototype: no rank change, no dropped boards, which this stream has none of)."""

STREAM_BODY = r"""
local boards = tonumber(ARGV[P + 4])
redis.call('DEL', KEYS[#KEYS])
local a = P + 7
a = a + 1 + 2 * tonumber(ARGV[a])
a = a + 1
local changed = {}
for b = 1, boards do
  redis.call('SADD', KEYS[10], ARGV[a])
  changed[2 * b - 1], changed[2 * b] = ARGV[a], ARGV[a + 1]
  a = a + 3
end
redis.call('XADD', KEYS[11], 'MAXLEN', '~', ARGV[P + 2], '*', 'snapshot_id', ARGV[3], 'published_at', ARGV[8],
           'previous', previous or '', 'full', 'delta', 'aliases', '[]',
           'boards', '[' .. table.concat(changed, ',') .. ']', 'dropped', '[]')
return 1
"""
"""Design (a)'s Redis part: the changes only (the boards are the serving processes')."""


def swapped(body: str, name: str) -> Script:
    """``PUBLISH_BOARDS`` with its board loop (``lua/publish_boards.lua``) replaced by ``body``."""
    script = dataclasses.replace(PUBLISH_BOARDS, name=name)
    script.__dict__["source"] = PUBLISH_BOARDS.source.replace(piece("publish_boards"), body)
    return script


class Layout3State(BoardsState):
    """Today's arguments, but the players' CRC-32 only for the ``all`` boards (the only ones with buckets),
    and after each other board's entries its ``ZADD`` arguments: flat (``mode`` 1), or one JSON object of
    player -> score (``mode`` 2: ``orjson`` packs it, ``cjson`` unpacks it in Redis)."""

    script = swapped(LAYOUT3_BODY, "publish_boards_layout3")
    mode = "1"

    def args(self) -> list[Any]:
        args = PUBLISH_BOARDS.at_p(full="full" if self._full else "delta", layout=LAYOUT, changes_cap=100,
                                   entry_bytes=1 << 20, changed=len(self._pending), dropped=len(self._dropped),
                                   rank_change="", aliases=0)
        hashes = {p: zlib.crc32(p.encode()) for (_, board), entries in self._pending.items() if board == "all"
                  for p in entries}
        args.append(orjson.dumps(hashes))
        for (game, board), entries in self._pending.items():
            args += (board_name(game, board), orjson.dumps(entries), len(entries), "" if board == "all" else self.mode)
            if board == "all":
                continue
            if self.mode == "2":
                args.append(orjson.dumps({p: key_double(order_key(board, score, at))
                                          for p, (score, at) in entries.items()}))
            else:
                for p, (score, at) in entries.items():
                    args += (repr(key_double(order_key(board, score, at))), p)
        return args


class Layout3JsonState(Layout3State):
    mode = "2"


class StreamState(BoardsState):
    script = swapped(STREAM_BODY, "publish_boards_stream")


VARIANTS = ("layout2", "layout3", "layout3j", "zadd", "stream")
STATES: dict[str, type[BoardsState]] = {"layout2": BoardsState, "layout3": Layout3State, "layout3j": Layout3JsonState,
                                        "stream": StreamState}

Boards = dict[tuple[str, str], dict[str, tuple[int, int]]]


def initial_boards(sizes: list[int], rng: random.Random) -> Boards:
    """Each game's boards before the stream: scores and times as a season would leave them."""
    boards: Boards = {}
    for g, n in enumerate(sizes):
        game = f"g{g}"
        for board in BOARDS:
            boards[(game, board)] = {}
        for i in range(n):
            player = f"u{g}-{i:07d}"
            boards[(game, "all")][player] = (rng.randrange(0, 2_000_000), DAY0 - rng.randrange(1, 300 * DAY_MS))
            boards[(game, "best")][player] = (rng.randrange(0, 10_001), DAY0 - rng.randrange(1, 300 * DAY_MS))
            u = rng.random()
            if u < 0.40:
                boards[(game, WEEKLY)][player] = (rng.randrange(0, 100_000), WEEK0 + rng.randrange(2 * DAY_MS))
            if u < 0.15:
                boards[(game, DAILY)][player] = (rng.randrange(0, 30_000), DAY0 + rng.randrange(DAY_MS // 2))
    return boards


def stream(boards: Boards, sizes: list[int], snapshots: int, per: int, rng: random.Random,
           clock: list[int]) -> list[Boards]:
    """``snapshots`` snapshots of about ``per`` entries each (the latest per player and board), from
    results applied to ``boards`` by the rules (sums on ``all`` and the periods, the best on ``best``)."""
    weights = [n ** 0.5 for n in sizes]
    out = []
    for _ in range(snapshots):
        snap: Boards = {}
        count = 0
        while count < per:
            g = rng.choices(range(len(sizes)), weights)[0]
            game = f"g{g}"
            if rng.random() < 0.9:
                player = f"u{g}-{rng.randrange(sizes[g]):07d}"
            else:
                player = f"n{g}-{rng.getrandbits(40):010x}"
            points, played = rng.randrange(1, 10_001), clock[0]
            clock[0] += rng.randrange(1, 20)
            for board in ("all", WEEKLY, DAILY):
                score, _ = boards[(game, board)].get(player, (0, 0))
                boards[(game, board)][player] = entry = (score + points, played)
                before = len(snap.setdefault((game, board), {}))
                snap[(game, board)][player] = entry
                count += len(snap[(game, board)]) - before
            best = boards[(game, "best")].get(player)
            if best is None or points > best[0]:
                boards[(game, "best")][player] = (points, played)
                before = len(snap.setdefault((game, "best"), {}))
                snap[(game, "best")][player] = (points, played)
                count += len(snap[(game, "best")]) - before
        out.append(snap)
    return out


class Variant:
    """One variant on its own Redis: its loaded boards and how it takes a snapshot's entries."""

    def __init__(self, name: str, workdir: str) -> None:
        self.name = name
        self.service = LocalRedis(free_port(), f"{workdir}/{name}").start()
        self.client = redis.Redis.from_url(self.service.url)
        self.ns = boards_namespace("bench-writes")
        self.token, generation = join_run(self.client, self.ns, "bench-writes", fresh=True)
        self.keys = Keys(self.ns).of_generation(generation)
        self.publisher = (Publisher(self.service.url, self.ns, self.token, generation, live=True,
                                    state=STATES[name]()) if name in STATES else None)
        self.epoch = 0

    def cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def load(self, boards: Boards) -> None:
        """Write ``boards`` directly in the variant's layout (no script: a faster load than the flow's)."""
        if self.name == "stream":
            return
        for (game, board), entries in boards.items():
            z, r = self.keys.board(game, board)
            bare = self.name == "zadd" or (self.name.startswith("layout3") and board != "all")
            items = list(entries.items())
            buckets = max(1, -(-len(items) // BUCKET_LOAD))
            if not bare and buckets > 1:
                self.client.set(r, buckets)
            for i in range(0, len(items), 5000):
                pipe = self.client.pipeline(transaction=False)
                chunk = items[i:i + 5000]
                if bare:
                    pipe.zadd(z, {p: key_double(order_key(board, s, at) if board != "all" else
                                                all_key(s, at)) for p, (s, at) in chunk})
                else:
                    pipe.zadd(z, {member(p, at): -s for p, (s, at) in chunk})
                    grouped: dict[int, dict[str, bytes]] = {}
                    for p, (_, at) in chunk:
                        grouped.setdefault(bucket_index(p, buckets), {})[p] = at.to_bytes(REACHED_BYTES, "big")
                    for b, mapping in grouped.items():
                        pipe.hset(f"{r}:{b}", mapping=mapping)  # type: ignore[arg-type]
                pipe.execute()

    def write(self, snap: Boards) -> None:
        self.epoch += 1
        if self.publisher is None:
            pipe = self.client.pipeline(transaction=False)
            for (game, board), entries in snap.items():
                pipe.zadd(self.keys.board(game, board)[0],
                          {p: key_double(order_key(board, s, at) if board != "all" else all_key(s, at))
                           for p, (s, at) in entries.items()})
            pipe.execute()
            return
        sid = self.token * SNAPSHOT_ID_RUN_FACTOR + self.epoch
        snapshot = BoardsSnapshot(snapshot_id=sid, run=self.token, epoch=self.epoch,
                                  positions={"bench/0": self.epoch}, dead_letters=0, k_max=100, boards={},
                                  entries=snap, dropped=[], aliases={}, partition_lag_ms={}, errors=[])
        if self.publisher.publish(snapshot) != 1:
            raise RuntimeError(f"{self.name}: snapshot {sid} was not stored")

    def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        self.service.stop()


def all_key(score: int, reached_at: int) -> int:
    """The ``zadd`` floor's stand-in for ``all`` (not exact: a sum above 32,751 wraps)."""
    return ((points_cap("all") - score) % (points_cap("all") + 1)) << 48 | reached_at


def bucket_index(player: str, buckets: int) -> int:
    h = zlib.crc32(player.encode())
    low = 1 << (buckets.bit_length() - 1)
    b = h % low
    return h % (2 * low) if b < buckets - low else b


def board_rows(v: Variant, game: str, board: str) -> list[tuple[str, int, int]]:
    """A board of ``v`` top down as ``(player, score, reached_at)``, decoded from its layout."""
    flat = v.client.zrange(v.keys.board(game, board)[0], 0, -1, withscores=True)
    if v.name == "layout2" or board == "all":  # layout 2's members
        return [(p, -int(s), at) for m, s in flat for p, at in (member_fields(m),)]
    kind, rows = kind_of(board), []
    for m, s in flat:
        key = key_of_double(s)
        bits = TIME_BITS[kind]
        rows.append((m.decode(), points_cap(kind) - (key >> bits), origin_of(board) + (key & ((1 << bits) - 1))))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--players", default="1000000,100000,10000", help="players per game (comma-separated)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--snapshots", type=int, default=150, help="snapshots per rep and variant")
    ap.add_argument("--entries", type=int, default=700, help="entries per snapshot")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--only", default="", help="keep only these board kinds' entries in the stream (e.g. "
                    "best,daily,weekly: what layout 3 writes with one ZADD)")
    ap.add_argument("--check", action="store_true", help="compare layout3's boards with layout2's at the end")
    a = ap.parse_args()
    try:
        sizes = [int(n) for n in a.players.split(",")]
        names = a.variants.split(",")
        if any(n < 1 for n in sizes) or not set(names) <= set(VARIANTS) or "layout2" not in names:
            raise ValueError
    except ValueError:
        print(f"bench_board_writes: --players takes positive counts, --variants some of {','.join(VARIANTS)} "
              "with layout2", file=sys.stderr)
        return 2
    kinds = set(a.only.split(",")) - {""}
    if not kinds <= set(TIME_BITS):
        print("bench_board_writes: --only takes board kinds: all, best, daily, weekly", file=sys.stderr)
        return 2
    rng = random.Random(41)
    boards = initial_boards(sizes, rng)
    print(f"boards: {', '.join(f'{b}={sum(len(e) for (_, bb), e in boards.items() if bb == b)}' for b in BOARDS)}",
          flush=True)
    results: dict[str, list[float]] = {n: [] for n in names}
    client: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as workdir:
        variants = [Variant(n, workdir) for n in names]
        try:
            for v in variants:
                v.load(boards)
            clock = [DAY0 + DAY_MS // 2]
            warm = stream(boards, sizes, 5, a.entries, rng, clock)
            for v in variants:  # the first snapshot is sent whole (full): not measured
                for snap in warm:
                    v.write(snap)
            for rep in range(a.reps):
                snaps = stream(boards, sizes, a.snapshots, a.entries, rng, clock)
                if kinds:
                    snaps = [{bid: e for bid, e in snap.items() if kind_of(bid[1]) in kinds} for snap in snaps]
                entries = sum(len(e) for snap in snaps for e in snap.values())
                order = variants if rep % 2 == 0 else variants[::-1]
                line = []
                for v in order:
                    before, own = v.cpu(), time.process_time()
                    for snap in snaps:
                        v.write(snap)
                    per_m = (v.cpu() - before) / entries * 1e6
                    results[v.name].append(per_m)
                    client[v.name].append((time.process_time() - own) / entries * 1e6)
                    line.append(f"{v.name} {per_m:.2f} (client {client[v.name][-1]:.2f})")
                print(f"rep {rep + 1}: {entries} entries; Redis CPU-s per 1M entries: {', '.join(line)}", flush=True)
            base = statistics.median(results["layout2"])
            for n in names:
                med = statistics.median(results[n])
                print(f"{n}: median {med:.2f} CPU-s per 1M entries ({med:.2f} us an entry), x{med / base:.2f} "
                      f"layout2; this process (building and sending the calls) {statistics.median(client[n]):.2f} us "
                      "an entry", flush=True)
            if a.check and "layout3" in names:
                by = {v.name: v for v in variants}
                bad = [(game, board) for game, board in boards for n in names if n.startswith("layout3")
                       if board_rows(by["layout2"], game, board) != board_rows(by[n], game, board)]
                ok = all(board_rows(by["layout3"], g, b) == sorted(
                    ((p, s, at) for p, (s, at) in boards[(g, b)].items()), key=lambda e: (-e[1], e[2], e[0].encode()))
                    for g, b in boards if not kinds or kind_of(b) in kinds)
                print(f"check: {len(bad)} boards of layout 3 differ from layout 2's; the model's order: "
                      f"{'equal' if ok else 'DIFFERENT'}", flush=True)
                if bad or not ok:
                    return 1
        finally:
            for v in variants:
                v.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
