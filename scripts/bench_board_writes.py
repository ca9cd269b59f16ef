"""What Redis spends per changed board entry: the boards flow's publisher against the floors under it.

    .venv/bin/python scripts/bench_board_writes.py [--players 1000000,100000,10000] [--reps 3]
        [--snapshots 150] [--entries 700] [--variants today,zadd,stream] [--only KINDS] [--check]

Issue 41, item 2 chose the boards' Redis layout with a prototype of this script (its variants
``layout2``, ``layout3`` and ``layout3j``, a copy of the publish script's board loop; their
figures are in docs/benchmarks.md, "One write per changed entry"). Layout 3 landed
(``connectors/board_layout.py``), and the prototype variants were removed with it: what is
measured now is the real publisher against the floors under it.

It starts its own Redis servers (``rankflow.services.LocalRedis``), one per variant, loads the
same boards into each (three games of ``--players`` players: ``all`` and ``best`` hold every
player, the current week 40% of them, the current day 15%), then replays the same stream of
entry updates through each, alternating variants ``--reps`` times (each rep ``--snapshots``
snapshots of ``--entries`` entries: 90% a player already there whose score rises, 10% a new
one, as the rules make them). Variants:

- ``today``: the boards flow's own publisher (``Publisher``, ``BoardsState``, the real
  ``scripts.PUBLISH_BOARDS``) over boards loaded in today's layout: ``best`` and the periods
  bare ids scored by their order keys (``board_layout.KeyedBoard``), ``all`` layout 2's
  members with their ``reached_at`` buckets;
- ``zadd``: the floor, no script: one pipelined ``ZADD`` of bare ids per board, the keyed
  boards with the same scores (``KeyedBoard.scores_json``), ``all`` with ``-score`` as if its
  key fitted (its order then not section 4's: it is a cost, not a board);
- ``stream``: a what-if floor, design (a) of docs/design.md (rejected): ``PUBLISH_BOARDS``
  with its board loop swapped for one that keeps only the ``board_changes`` stream and the
  boards' set (:data:`STREAM_BODY`; the boards would be the serving processes'). rankflow
  never runs this body.

Prints per rep and variant Redis's CPU seconds (``INFO cpu``: ``used_cpu_sys`` +
``used_cpu_user``) per 1M entries (and this process's CPU µs an entry: building and sending
the calls, the flow's publisher's share for ``today``), then the medians and the ratios to
``today``. With ``--check`` it then reads every board ``today`` wrote back, decoded with
``board_layout.entries_of``, and compares it entry by entry in order with the model the
stream was made from; exit 1 if any differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import random
import statistics
import sys
import tempfile
import time
from typing import Any, NoReturn, cast

import orjson
import redis

from rankflow.connectors.board_layout import BUCKET_LOAD, REACHED_BYTES, TIME_BITS, bucket_of, entries_of, keyed, member
from rankflow.connectors.redis_boards import BoardsState
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
KINDS = ("all", *TIME_BITS)

STREAM_BODY = r"""
local boards = tonumber(ARGV[P + 4])
local a = P + 9
a = a + 1 + 2 * tonumber(ARGV[a])
a = a + 1
local changed = {}
for b = 1, boards do
  redis.call('SADD', KEYS[10], ARGV[a])
  changed[2 * b - 1], changed[2 * b] = ARGV[a], ARGV[a + 1]
  a = a + 4
end
redis.call('XADD', KEYS[11], 'MAXLEN', '~', ARGV[P + 2], '*', 'snapshot_id', ARGV[3], 'published_at', ARGV[8],
           'previous', previous or '', 'full', 'delta', 'aliases', '[]',
           'boards', '[' .. table.concat(changed, ',') .. ']', 'dropped', '[]')
return 1
"""
"""A what-if floor, not rankflow's code: design (a)'s Redis part, the changes only (the boards
would be held by the serving processes). It replaces ``lua/publish_boards.lua`` in
``PUBLISH_BOARDS`` (the prelude stays) and reads the same arguments; it handles no aliases,
dropped, closed or expired boards, which this stream has none of."""


def swapped(body: str, name: str) -> Script:
    """``PUBLISH_BOARDS`` with its board loop (``lua/publish_boards.lua``) replaced by ``body``."""
    script = dataclasses.replace(PUBLISH_BOARDS, name=name)
    script.__dict__["source"] = PUBLISH_BOARDS.source.replace(piece("publish_boards"), body)
    return script


class StreamState(BoardsState):
    """Today's arguments, sent to :data:`STREAM_BODY`."""

    script = swapped(STREAM_BODY, "publish_boards_stream_floor")


VARIANTS = ("today", "zadd", "stream")
STATES: dict[str, type[BoardsState]] = {"today": BoardsState, "stream": StreamState}

Boards = dict[tuple[str, str], dict[str, tuple[int, int]]]


def kind_of(board: str) -> str:
    return board.partition(":")[0]


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


def floor_scores(board: str, entries: dict[str, tuple[int, int]]) -> dict[str, float]:
    """The ``zadd`` floor's scores of bare ids: a keyed board's own (its order keys, from the
    kernel as the publisher makes them), ``all``'s ``-score`` (no tie-break: a cost only)."""
    codec = keyed(board)
    if codec is None:
        return {p: -s for p, (s, _) in entries.items()}
    scores: dict[str, float] = orjson.loads(codec.scores_json(entries))
    return scores


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
            bucketed = self.name == "today" and keyed(board) is None  # all: members and reached_at buckets
            items = list(entries.items())
            buckets = max(1, -(-len(items) // BUCKET_LOAD))
            if bucketed and buckets > 1:
                self.client.set(r, buckets)
            for i in range(0, len(items), 5000):
                pipe = self.client.pipeline(transaction=False)
                chunk = dict(items[i:i + 5000])
                if not bucketed:
                    pipe.zadd(z, floor_scores(board, chunk))
                else:
                    pipe.zadd(z, {member(p, at): -s for p, (s, at) in chunk.items()})
                    grouped: dict[int, dict[str, bytes]] = {}
                    for p, (_, at) in chunk.items():
                        grouped.setdefault(bucket_of(p, buckets), {})[p] = at.to_bytes(REACHED_BYTES, "big")
                    for b, mapping in grouped.items():
                        pipe.hset(f"{r}:{b}", mapping=mapping)  # type: ignore[arg-type]
                pipe.execute()

    def write(self, snap: Boards) -> None:
        self.epoch += 1
        if self.publisher is None:
            pipe = self.client.pipeline(transaction=False)
            for (game, board), entries in snap.items():
                pipe.zadd(self.keys.board(game, board)[0], floor_scores(board, entries))
            pipe.execute()
            return
        sid = self.token * SNAPSHOT_ID_RUN_FACTOR + self.epoch
        snapshot = BoardsSnapshot(snapshot_id=sid, run=self.token, epoch=self.epoch,
                                  positions={"bench/0": self.epoch}, dead_letters=0, k_max=100, boards={},
                                  entries=snap, dropped=[], aliases={}, partition_lag_ms={}, errors=[])
        if self.publisher.publish(snapshot) != 1:
            raise RuntimeError(f"{self.name}: snapshot {sid} was not stored")

    def rows(self, game: str, board: str) -> list[tuple[str, int, int]]:
        """A board top down as ``(player, score, reached_at)``, decoded as the readers decode it."""
        decode = entries_of(board)
        flat = cast(list[tuple[bytes, float]], self.client.zrange(self.keys.board(game, board)[0], 0, -1,
                                                                   withscores=True))
        return [decode(m, s) for m, s in flat]

    def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        self.service.stop()


def model_rows(entries: dict[str, tuple[int, int]]) -> list[tuple[str, int, int]]:
    """A board of the model top down: docs/semantics/boards.md 4 (score down, then reached_at, then id bytes)."""
    return sorted(((p, s, at) for p, (s, at) in entries.items()), key=lambda e: (-e[1], e[2], e[0].encode()))


class Parser(argparse.ArgumentParser):
    """A mistake on the command line is one line on stderr, exit 2 (the usage would hide it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"bench_board_writes: {message} (see --help)\n")


def counts(text: str) -> list[int]:
    try:
        values = [int(n) for n in text.split(",")]
    except ValueError:
        values = []
    if not values or any(n < 1 for n in values):
        raise argparse.ArgumentTypeError(f"takes positive counts, comma-separated, not {text!r}")
    return values


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"takes a positive count, not {text!r}")
    return int(text)


def names_of(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        names = [n for n in text.split(",") if n]
        if not set(names) <= set(allowed) or len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"takes some of {','.join(allowed)}, each once, not {text!r}")
        return names
    return parse


def main() -> int:
    ap = Parser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--players", type=counts, default=[1_000_000, 100_000, 10_000],
                    help="players per game (comma-separated; default 1000000,100000,10000)")
    ap.add_argument("--reps", type=positive, default=3)
    ap.add_argument("--snapshots", type=positive, default=150, help="snapshots per rep and variant")
    ap.add_argument("--entries", type=positive, default=700, help="entries per snapshot")
    ap.add_argument("--variants", type=names_of(VARIANTS), default=list(VARIANTS),
                    help=f"some of {','.join(VARIANTS)} (today, the baseline, always runs)")
    ap.add_argument("--only", type=names_of(KINDS), default=[],
                    help="keep only these board kinds' entries in the measured stream (e.g. best,daily,weekly)")
    ap.add_argument("--check", action="store_true",
                    help="compare every board today wrote with the model at the end (exit 1 on a difference)")
    a = ap.parse_args()
    sizes: list[int] = a.players
    names = ["today", *(n for n in a.variants if n != "today")]
    kinds = set(a.only)
    rng = random.Random(41)
    boards = initial_boards(sizes, rng)
    print(f"boards: {', '.join(f'{b}={sum(len(e) for (_, bb), e in boards.items() if bb == b)}' for b in BOARDS)}",
          flush=True)
    results: dict[str, list[float]] = {n: [] for n in names}
    client: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as workdir:
        variants: list[Variant] = []
        try:
            for n in names:
                variants.append(Variant(n, workdir))
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
            base = statistics.median(results["today"])
            for n in names:
                med = statistics.median(results[n])
                print(f"{n}: median {med:.2f} CPU-s per 1M entries ({med:.2f} us an entry), x{med / base:.2f} "
                      f"today; this process (building and sending the calls) {statistics.median(client[n]):.2f} us "
                      "an entry", flush=True)
            if a.check:
                today = variants[0]
                checked = [bid for bid in boards if not kinds or kind_of(bid[1]) in kinds]
                bad = [bid for bid in checked if today.rows(*bid) != model_rows(boards[bid])]
                listed = {tuple(orjson.loads(raw)) for raw in today.client.smembers(today.keys.boards)}
                unlisted = [bid for bid in checked if bid not in listed]
                print(f"check: {len(checked)} boards of today ({sum(len(boards[b]) for b in checked)} entries) "
                      f"against the model: {len(bad)} differ{': ' + str(bad) if bad else ''}, {len(unlisted)} "
                      "missing from the boards set", flush=True)
                if bad or unlisted:
                    return 1
        finally:
            for v in variants:
                v.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
