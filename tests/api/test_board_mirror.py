"""The API's in-process board mirror (``api.board_mirror``, ``state.board_index``).

* A property test of the live boards against a plain model: random change sets,
  applied in random slices, with queries interleaved at random; what is served is
  exactly the model at the snapshot it names, also half-way through a change set.
* Against a real Redis, snapshots published by the real publisher (``Publisher`` and
  ``BoardsState``, the flow's own sink): the mirror answers every query exactly as
  the Redis reader does, after a load made while snapshots were being published, and
  it loads again when it cannot follow: the stream was trimmed past its position,
  the publisher sent its whole state (``full``), a snapshot was too large to stream
  (``large``), a rebuild switched the generation.
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from typing import Any

import orjson
import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import given, settings, strategies as st

from rankflow.api.board_mirror import BoardMirror
from rankflow.api.http_cache import HttpCache
from rankflow.connectors.board_read import AsyncBoardReader, NoSuchBoard, NotOnBoard
from rankflow.connectors import redis_boards
from rankflow.connectors.redis_boards import BoardsState
from rankflow.connectors.redis_generations import claim_generation, join_run, new_run_token, switch_generation
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_publish import Publisher, dumps_document
from rankflow.connectors.snapshot_age import judged
from rankflow.connectors.board_layout import keyed
from rankflow.state.board_index import ALIAS, CREATE, DROP, UPSERT, BoardsCopy, ChangeSet, LiveBoards, Served, entry_key
from rankflow.state.snapshot import snapshot_id
from tests.engine.test_script_keys import boards_snap  # a BoardsSnapshot from (player, changes) pairs
from tests.snapshot_stamp import stamped

PLAYERS = ["a", "ab", "b", "é", "🎮", "z", "clan/zoe", "Z"]


def day_start(board: str) -> int:
    """The first ms of a daily board's day: its entries' ``reached_at`` are in it (layout 3 keys them from it)."""
    codec = keyed(board)
    assert codec is not None
    return codec.origin
BOARDS = [("g", "all"), ("g", "best"), ("g", "daily:2027-01-01"), ("g", "daily:2027-01-02"), ("h", "all")]


# -- the live boards against a model ---------------------------------------------------

Model = dict[tuple[str, str], dict[str, tuple[int, int]]]


def ordered(board: dict[str, tuple[int, int]]) -> list[tuple[str, int, int, int]]:
    """(player, score, rank, competition rank) in docs/semantics/boards.md 4's order."""
    entries = sorted(board.items(), key=lambda e: (-e[1][0], e[1][1], e[0].encode()))
    out = []
    for rank, (player, (score, _)) in enumerate(entries, start=1):
        competition = out[-1][3] if out and out[-1][1] == score else rank
        out.append((player, score, rank, competition))
    return out


change_sets = st.lists(st.lists(st.one_of(
    st.tuples(st.just(UPSERT), st.sampled_from(BOARDS), st.sampled_from(PLAYERS), st.integers(0, 4),
              st.integers(0, 3)),
    st.tuples(st.just(DROP), st.sampled_from(BOARDS)),
    st.tuples(st.just(ALIAS), st.sampled_from(["g", "h"]), st.sampled_from([None, "2027-01-01", "2027-01-02"]))),
    max_size=12), min_size=1, max_size=12)


def as_change_set(sid: int, raw: list[tuple[Any, ...]]) -> ChangeSet:
    ops: list[tuple[Any, ...]] = []
    for op in raw:
        if op[0] == UPSERT:
            _, bid, player, score, at = op
            ops += [(CREATE, bid), (UPSERT, bid, player, entry_key(player, score, at))]
        elif op[0] == DROP:
            ops.append(op)
        else:
            ops.append((ALIAS, op[1], [op[2], None]))
    return ChangeSet(sid, ops)


def model_states(raws: list[list[tuple[Any, ...]]]) -> list[tuple[Model, dict[str, list[str | None]]]]:
    """The model's boards and aliases after 0, 1, 2 ... change sets."""
    boards: Model = {}
    aliases: dict[str, list[str | None]] = {}
    states = [({}, {})]
    for raw in raws:
        for op in raw:
            if op[0] == UPSERT:
                boards.setdefault(op[1], {})[op[2]] = (op[3], op[4])
            elif op[0] == DROP:
                boards.pop(op[1], None)
            else:
                aliases[op[1]] = [op[2], None]
        states.append(({bid: dict(b) for bid, b in boards.items()}, dict(aliases)))
    return states


def check_serving(served: Served, states: list[tuple[Model, dict[str, list[str | None]]]], player: str,
                  bid: tuple[str, str], start: int, stop: int) -> None:
    boards, aliases = states[served.snapshot_id]
    assert set(served.boards) == set(boards) and served.aliases == aliases
    for game in ("g", "h"):
        daily = aliases.get(game, [None, None])[0]
        assert served.resolve(game, "daily") == ("daily" if daily is None else f"daily:{daily}")
    index = served.board(bid)
    if bid not in boards:
        assert index is None
        return
    assert index is not None
    expected = ordered(boards[bid])
    rows = [(i["player_id"], i["score"], i["rank"], i["competition_rank"]) for i in index.items(0, len(index) + 2)]
    assert rows == expected and len(index) == len(expected)
    for first, end in [(start, stop), *((f, f + w) for f in range(len(expected)) for w in (1, 2))]:
        part = [(i["player_id"], i["score"], i["rank"], i["competition_rank"]) for i in index.items(first, end)]
        assert part == expected[first:end], (first, end)
    mine = [row for row in expected if row[0] == player]
    assert index.rank0(player) == (mine[0][2] - 1 if mine else None)
    assert (index.key(player) is None) == (not mine)
    if mine:
        assert index.better_than(mine[0][1]) + 1 == mine[0][3]


@settings(max_examples=300, deadline=None)
@given(raws=change_sets, plan=st.lists(st.tuples(st.sampled_from(["add", "step", "query"]), st.integers(1, 6),
                                                  st.sampled_from(PLAYERS), st.sampled_from(BOARDS),
                                                  st.integers(0, 9), st.integers(0, 9)), max_size=60))
def test_the_served_boards_are_always_the_model_at_their_snapshot(raws, plan):
    """Queries between any two slices of any change sets: each board as of the last change
    set wholly applied (the live boards corrected by the one half applied)."""
    changes = [as_change_set(sid, raw) for sid, raw in enumerate(raws, start=1)]
    states = model_states(raws)
    live = LiveBoards(BoardsCopy(0, {}, {}))
    added = 0
    for action, size, player, bid, start, stop in plan:
        if action == "add" and added < len(changes):
            live.add(changes[added])
            added += 1
        elif action == "step":
            before = live.serving.snapshot_id
            moved = live.step(size)
            assert (live.serving.snapshot_id != before) <= moved, "the served snapshot moves only when one is whole"
        check_serving(live.serving, states, player, bid, start, stop)
    for change in changes[added:]:
        live.add(change)
    for player in PLAYERS:  # then one operation at a time, every board and player half-way
        for bid in BOARDS:
            check_serving(live.serving, states, player, bid, 1, 4)
        live.step(1)
    while live.pending:
        live.step(1)
        for bid in BOARDS:
            check_serving(live.serving, states, PLAYERS[live.live.op % len(PLAYERS)], bid, live.live.op % 5, 6)
    assert live.serving.snapshot_id == len(changes)
    for player in PLAYERS:
        for bid in BOARDS:
            check_serving(live.serving, states, player, bid, 0, 9)
    for board in live.live.boards.values():
        board._check()


@settings(max_examples=200, deadline=None)
@given(raws=change_sets, plan=st.lists(st.tuples(st.sampled_from(["add", "step", "query"]), st.integers(1, 6),
                                                  st.sampled_from(PLAYERS),
                                                  st.sampled_from([*BOARDS, ("g", "daily"), ("h", "daily")])),
                                        max_size=60))
def test_the_prepared_rank_follows_the_served_boards(raws, plan):
    """``player_bytes`` keeps each board's parts while the live boards are the served ones
    (``LiveBoards.untouched``): asked between any two slices of any change sets, by board
    name or alias, it answers the model at the served snapshot, never a board half changed
    or an alias gone."""
    changes = [as_change_set(sid, raw) for sid, raw in enumerate(raws, start=1)]
    for change in changes:
        change.published_at = 1_800_000_000_000 + change.snapshot_id
    states = model_states(raws)
    mirror = BoardMirror(aioredis.Redis(), "t")  # no connection is made: the boards are set here
    live = LiveBoards(BoardsCopy(0, {}, {}, 1_800_000_000_000))
    mirror._buffer, mirror._missing, mirror.ready = live, None, True
    added = 0
    for action, size, player, (game, board) in [*plan, *(("query", 1, p, b) for p in PLAYERS for b in BOARDS)]:
        if action == "add" and added < len(changes):
            live.add(changes[added])
            added += 1
        elif action == "step":
            live.step(size)
        boards, aliases = states[live.serving.snapshot_id]
        name = board
        if board == "daily" and aliases.get(game, [None])[0] is not None:
            name = f"daily:{aliases[game][0]}"
        mine = [row for row in ordered(boards.get((game, name), {})) if row[0] == player]
        if (game, name) not in boards:
            with pytest.raises(NoSuchBoard):
                mirror.player_bytes(game, board, player, 1000)
            with pytest.raises(NoSuchBoard):
                mirror.player_reply(game, board, player, 1000, b"/", b"no-cache")
        elif not mine:
            with pytest.raises(NotOnBoard):
                mirror.player_bytes(game, board, player, 1000)
            with pytest.raises(NotOnBoard):
                mirror.player_reply(game, board, player, 1000, b"/", b"no-cache")
        else:
            answer = orjson.loads(mirror.player_bytes(game, board, player, 1000))
            assert (answer["snapshot_id"], answer["board"], answer["score"], answer["rank"],
                    answer["competition_rank"]) == (live.serving.snapshot_id, name, *mine[0][1:])
            same_reply(mirror, game, board, player)  # the kernel's, or a view's from Python


# -- against Redis ---------------------------------------------------------------------------

class RandomBoards:
    """Random snapshots of a few small boards, published by the flow's publisher."""

    def __init__(self, url: str, namespace: str, seed: int) -> None:
        self.url, self.ns = url, boards_namespace(namespace)
        self.rng = random.Random(seed)
        client = redis.Redis.from_url(url)
        self.token, self.generation = join_run(client, self.ns, uuid.uuid4().hex, fresh=True)
        client.close()
        self.publisher = Publisher(url, self.ns, self.token, self.generation, state=BoardsState())
        self.epoch = 0
        self.live: set[tuple[str, str]] = set()

    def snapshot(self, token: int | None = None) -> Any:
        rng, self.epoch = self.rng, self.epoch + 1
        entries = []
        for _ in range(rng.randrange(0, 12)):
            player = rng.choice(PLAYERS) + str(rng.randrange(4))
            game, board = rng.choice(BOARDS)
            self.live.add((game, board))
            at = rng.randrange(0, 4) + (day_start(board) if board.startswith("daily:") else 0)  # in the period
            entries.append((player, ((game, board, rng.randrange(0, 6), at, True),)))
        dropped = []
        if rng.random() < 0.1 and self.live:
            dropped = [rng.choice(sorted(self.live))]
            self.live.discard(dropped[0])
            entries = [e for e in entries if e[1][0][:2] != dropped[0]]
        aliases = {"g": (rng.choice(["2027-01-01", "2027-01-02"]), "2026-W53")} if rng.random() < 0.3 else {}
        return boards_snap(token or self.token, self.epoch, entries, dropped, aliases)

    def publish(self, n: int) -> None:
        for _ in range(n):
            assert self.publisher.publish(self.snapshot()) == 1

    def last(self) -> bytes:
        """The id of the last snapshot :meth:`publish` stored."""
        return str(snapshot_id(self.token, self.epoch)).encode()

    def close(self) -> None:
        self.publisher.close()


async def same_answers(mirror: BoardMirror, reader: AsyncBoardReader) -> None:
    """Every query, from the mirror and from Redis (nothing is published meanwhile): the same
    answers, each naming the snapshot's ``published_at`` as Redis holds it, and an age."""
    assert mirror.ready
    assert mirror.boards() == await reader.boards()
    k = mirror.keys.of_generation(int(await reader.client.get(mirror.keys.generation) or 0))
    at = int(await reader.client.get(k.published_at))

    def same(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
        return stamped(mine, at) == stamped(theirs, at)

    for game, board in [*BOARDS, ("g", "daily"), ("h", "daily"), ("x", "all")]:
        try:
            expected = await reader.top(game, board, 1000)
        except NoSuchBoard as exc:
            with pytest.raises(NoSuchBoard, match=str(exc)):
                mirror.top(game, board, 1000)
            continue
        assert same(mirror.top(game, board, 1000), expected)
        assert same(mirror.top(game, board, 2), await reader.top(game, board, 2))
        for player in [i["player_id"] for i in expected["items"]] + ["nobody"]:
            try:
                answer = await reader.player(game, board, player)
            except NotOnBoard:
                with pytest.raises(NotOnBoard):
                    mirror.player(game, board, player)
                with pytest.raises(NotOnBoard):
                    mirror.player_bytes(game, board, player, 1000)
                continue
            assert same(mirror.player(game, board, player), answer)
            same_bytes(mirror, game, board, player)
            assert same(mirror.around(game, board, player, 1), await reader.around(game, board, player, 1))


def same_bytes(mirror: BoardMirror, game: str, board: str, player: str) -> None:
    """``player_bytes`` (the prepared rank) is the JSON of ``judged(player(...))``, byte for byte,
    whichever side of the staleness bound its age falls on."""
    for bound in (0, 10**9):
        made = mirror.player_bytes(game, board, player, bound)
        assert made is not None
        parsed = orjson.loads(made)
        assert made == dumps_document(judged(parsed, bound))  # the keys, their order, the age's "stale"
        assert stamped(parsed, parsed["published_at"]) == stamped(judged(mirror.player(game, board, player), bound),
                                                                  parsed["published_at"])
    same_reply(mirror, game, board, player)


def same_reply(mirror: BoardMirror, game: str, board: str, player: str) -> None:
    """``player_reply`` (the prepared rank with its validators, one call of the kernel; a view of
    a board half changed from Python): the body of ``player_bytes`` (but for the age: both read
    the clock) and the validator lines ``HttpCache.of_body`` makes of it for the request's
    target, fresh or stale (a bound of -1: every age is past it)."""
    path = f"/boards/{game}/{board}/players/{player}"
    for bound in (-1, 10**9):
        reply = mirror.player_reply(game, board, player, bound, path.encode(), b"public, max-age=1")
        assert reply is not None
        body, lines = reply
        made = mirror.player_bytes(game, board, player, bound)
        assert made is not None
        assert {**orjson.loads(body), "age_ms": 0} == {**orjson.loads(made), "age_ms": 0}
        assert body == dumps_document(judged(orjson.loads(body), bound))
        assert lines == HttpCache(1, []).of_body(path.encode(), body, path, None).lines


async def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_a_load_while_publishing_converges_then_follows_exactly(redis_url, namespace):
    boards = RandomBoards(redis_url, namespace, seed=1)
    boards.publish(20)

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        mirror = BoardMirror(client, namespace, poll_ms=5, slice_ops=3, load_chunk=2)
        reader = AsyncBoardReader(client, namespace)
        try:
            publishing = threading.Thread(target=boards.publish, args=(60,))
            publishing.start()  # the load reads the boards in 2-entry chunks meanwhile
            mirror.start()
            while publishing.is_alive():
                await asyncio.sleep(0.005)
            await until(lambda: mirror.ready and mirror.version[1] == boards.last())
            await same_answers(mirror, reader)
            for _ in range(5):  # then it follows, snapshot after snapshot
                await asyncio.to_thread(boards.publish, 7)
                await until(lambda: mirror.version[1] == boards.last())
                await same_answers(mirror, reader)
            assert mirror.loads == 1
        finally:
            await mirror.stop()
            await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        boards.close()


def test_it_loads_again_after_a_trim_a_full_state_a_large_one_and_a_rebuild(redis_url, redis_client, namespace,
                                                                             monkeypatch):
    boards = RandomBoards(redis_url, namespace, seed=2)
    boards.publish(5)
    keys = Keys(boards.ns, boards.generation)

    def last() -> bytes:
        return redis_client.get(Keys(boards.ns, int(redis_client.get(keys.generation) or 0)).snapshot_id)

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        mirror = BoardMirror(client, namespace, poll_ms=5)
        reader = AsyncBoardReader(client, namespace)
        try:
            mirror.start()
            await until(lambda: mirror.ready)
            await mirror.stop()  # it falls behind ...
            boards.publish(5)
            redis_client.xtrim(keys.board_changes, maxlen=2, approximate=False)  # ... further than the stream keeps
            mirror.start()
            await until(lambda: mirror.loads == 2 and mirror.ready and mirror.version[1] == last())
            await same_answers(mirror, reader)

            redis_client.delete(keys.snapshot_id)  # Redis "lost" the snapshot: the publisher sends it all
            again = Publisher(redis_url, boards.ns, boards.token, boards.generation, state=BoardsState(complete=True))
            assert again.publish(boards.snapshot()) == 1
            again.close()
            assert redis_client.xrevrange(keys.board_changes, count=1)[0][1][b"full"] == b"full"
            await until(lambda: mirror.loads == 3 and mirror.ready and mirror.version[1] == last())
            await same_answers(mirror, reader)

            monkeypatch.setattr(redis_boards, "BOARD_CHANGES_MAX_BYTES", 0)  # a snapshot too large to stream
            boards.publish(1)
            monkeypatch.undo()
            assert redis_client.xrevrange(keys.board_changes, count=1)[0][1][b"full"] == b"large"
            await until(lambda: mirror.loads == 4 and mirror.ready and mirror.version[1] == last())
            await same_answers(mirror, reader)

            rebuild = new_run_token(redis_client, boards.ns)  # a rebuild switches the generation
            claim_generation(redis_client, boards.ns, rebuild, rebuild)
            built = Publisher(redis_url, boards.ns, rebuild, rebuild, live=False, state=BoardsState())
            assert built.publish(boards.snapshot(token=rebuild)) == 1
            built.close()
            switch_generation(redis_client, boards.ns, boards.generation, rebuild)
            await until(lambda: mirror.loads == 5 and mirror.ready and mirror.version[:2] == (rebuild, last()))
            await same_answers(mirror, reader)
        finally:
            await mirror.stop()
            await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        boards.close()


def test_a_chunk_never_continues_after_an_anchor_whose_score_changed(redis_client, namespace):
    """An anchor is a place (member and score): a member that stayed but whose score
    changed (a total that fell, with the same ``reached_at``) has moved, and continuing
    after its new place would skip every unchanged entry between the two."""
    from rankflow.connectors.script_query import bind
    from rankflow.connectors.scripts import BOARD_CHUNK

    zset = f"{namespace}:chunk"
    redis_client.zadd(zset, {m: s for s, m in enumerate([b"a", b"b", b"c", b"d", b"e", b"f"])})
    chunk = bind(redis_client, BOARD_CHUNK)
    first = chunk(*BOARD_CHUNK.ordered({"board": zset}, {"size": 2}))
    assert first == [b"a", b"0", b"b", b"1"]
    redis_client.zadd(zset, {b"b": 9})  # b moves behind f; c, d, e and f did not change
    rest = chunk(*BOARD_CHUNK.ordered({"board": zset}, {"size": 10}, more_argv=first))
    assert rest[::2] == [b"c", b"d", b"e", b"f", b"b"]
    redis_client.zadd(zset, {b"a": 10})  # every anchor moved: start the board over
    assert chunk(*BOARD_CHUNK.ordered({"board": zset}, {"size": 10}, more_argv=first)) is None
