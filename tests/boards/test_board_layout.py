"""The boards' Redis layout (``connectors.board_layout``), against a real Redis.

Random snapshots of boards large enough to take several ``reached_at`` buckets go
through the flow's own publisher (``Publisher``, ``BoardsState``); after each one:

* every board, read whole, is the model's board in docs/semantics/boards.md 4's order;
* the layout holds: on ``all`` the bucket count is the least that kept the average at most
  ``BUCKET_LOAD`` with each snapshot's entries counted as new (buckets only grow), every
  player is in the bucket ``bucket_of`` names (Python's function agrees with the Lua that
  placed them), with the member's ``reached_at``, and nothing else is in the buckets; on
  a seeded board of thousands, every bucket is a listpack; on ``best`` and the periods every
  member is the bare id with its order key's double as score, and no bucket exists;
* at the ends of every keyed board's range (scores 0 and the cap, the first and last
  millisecond of a period, ``reached_at`` 0 and the last ms of 9999 on ``best``) the order, ranks,
  competition and dense ranks and pages are the model's;
* a sample of players' ranks from the Redis reader are the model's;
* a dropped board leaves no key behind.

A generation written in another layout (1, or 2: buckets on every board) is refused by the
publisher and the reader, with a message that says what to do.
"""

from __future__ import annotations

import json
import math
import random
import uuid

import orjson

import pytest
import redis
from hypothesis import HealthCheck, given, settings, strategies as st

from rankflow.connectors.board_layout import (
    BUCKET_LOAD,
    LAYOUT,
    REACHED_BYTES,
    BoardScoreTooHigh,
    RedisBoardsLayout,
    bucket_of,
    keyed,
    layout_message,
    member,
)
from rankflow.connectors.board_read import BoardReader, read_boards
from rankflow.connectors.redis_boards import BoardsState
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_publish import Publisher
from tests.engine.test_script_keys import boards_snap

BOARDS = [("g", "all"), ("g", "daily:2027-01-01"), ("h:x", "best")]
Model = dict[tuple[str, str], dict[str, tuple[int, int]]]


def in_order(entries: dict[str, tuple[int, int]]) -> list[tuple[str, int, int]]:
    ordered = sorted(entries.items(), key=lambda e: (-e[1][0], e[1][1], e[0].encode()))
    return [(player, score, at) for player, (score, at) in ordered]


def check_layout(client: redis.Redis, keys: Keys, game: str, board: str, entries: dict[str, tuple[int, int]],
                 buckets: int, listpacks: bool) -> None:
    zset, count_key = keys.board(game, board)
    codec = keyed(board)
    if codec is not None:
        assert not client.keys(count_key.replace("*", "\\*") + "*"), "no buckets on a keyed board"
        assert {m.decode(): s for m, s in client.zrange(zset, 0, -1, withscores=True)} == \
            {p: codec.score(score, at) for p, (score, at) in entries.items()}
        return
    n = int(client.get(count_key) or 1)
    assert n == buckets, "the fewest buckets that kept the load when each snapshot came"
    found: dict[str, bytes] = {}
    for i in range(n):
        bucket = f"{count_key}:{i}".encode()
        fields = client.hgetall(bucket)
        for player, at in fields.items():
            assert bucket_of(player.decode(), n) == i, f"{player!r} is in bucket {i}"
            found[player.decode()] = at
        if listpacks and fields:
            assert client.object("encoding", bucket) == b"listpack"
    assert found == {p: at.to_bytes(REACHED_BYTES, "big") for p, (_, at) in entries.items()}
    assert not client.exists(f"{count_key}:{n}"), "no bucket beyond the count"
    for player, (score, at) in entries.items():
        assert client.zscore(zset, member(player, at)) == -score


class Boards:
    def __init__(self, client: redis.Redis, url: str, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        ns = boards_namespace(namespace)
        self.token, generation = join_run(client, ns, uuid.uuid4().hex, fresh=True)
        self.keys = Keys(ns, generation)
        self.publisher = Publisher(url, ns, self.token, generation, state=BoardsState())
        self.epoch = 0
        self.model: Model = {}
        self.buckets: dict[tuple[str, str], int] = {}

    def publish(self, changes: list[tuple[str, str, str, int, int]], dropped: list[tuple[str, str]]) -> None:
        self.epoch += 1
        for bid in dropped:
            self.model.pop(bid, None)
            self.buckets.pop(bid, None)
        coming: dict[tuple[str, str], set[str]] = {}
        for game, board, player, _, _ in changes:
            coming.setdefault((game, board), set()).add(player)
        for bid, players in coming.items():
            if keyed(bid[1]) is not None:
                continue
            need = math.ceil((len(self.model.get(bid, {})) + len(players)) / BUCKET_LOAD)
            self.buckets[bid] = max(self.buckets.get(bid, 1), need)
        for game, board, player, score, at in changes:
            self.model.setdefault((game, board), {})[player] = (score, at)
        entries = [(player, ((game, board, score, at, True),)) for game, board, player, score, at in changes]
        assert self.publisher.publish(boards_snap(self.token, self.epoch, entries, dropped)) == 1

    def check(self, rng: random.Random, listpacks: bool = False) -> None:
        boards = read_boards(self.client, self.namespace)
        assert {(g, b) for g, per in boards.items() for b in per} == set(self.model)
        reader = BoardReader(self.client, self.namespace)
        for (game, board), entries in self.model.items():
            ordered = in_order(entries)
            assert boards[game][board] == ordered
            check_layout(self.client, self.keys, game, board, entries, self.buckets.get((game, board), 1), listpacks)
            for player, score, _ in rng.sample(ordered, min(5, len(ordered))):
                answer = reader.player(game, board, player)
                rank = [e[0] for e in ordered].index(player) + 1
                better = sum(1 for e in ordered if e[1] > score)
                assert (answer["rank"], answer["competition_rank"], answer["score"]) == (rank, better + 1, score)


changes_st = st.lists(st.tuples(st.sampled_from(range(len(BOARDS))), st.integers(0, 399), st.integers(0, 5),
                                st.integers(0, 2**48 - 1) | st.integers(0, 3)), max_size=300)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(snapshots=st.lists(st.tuples(changes_st, st.sets(st.sampled_from(range(len(BOARDS))), max_size=1)),
                          min_size=1, max_size=5),
       seed=st.integers(0, 2**32))
def test_boards_and_their_buckets_are_the_model_after_every_snapshot(redis_client, redis_url, snapshots, seed):
    boards = Boards(redis_client, redis_url, f"t-{uuid.uuid4().hex[:12]}")  # a namespace per example
    rng = random.Random(seed)
    try:
        for changes, dropped in snapshots:
            rows = [(*BOARDS[b], f"p{player}" if player % 3 else f"é{player}", score, in_period(BOARDS[b][1], at))
                    for b, player, score, at in changes]
            gone = [BOARDS[b] for b in dropped if BOARDS[b] in boards.model]
            rows = [r for r in rows if (r[0], r[1]) not in gone]
            boards.publish(rows, gone)
            boards.check(rng)
            for game, board in gone:
                zset, count_key = boards.keys.board(game, board)
                assert not redis_client.keys(zset.replace("*", "\\*") + "*") and \
                    not redis_client.keys(count_key + "*"), "a dropped board leaves no key"
    finally:
        boards.publisher.close()


def in_period(board: str, at: int) -> int:
    """A ``reached_at`` a board can hold: a period's is a time in it."""
    codec = keyed(board)
    return at if codec is None or board == "best" else codec.origin + at % (86_400_000 * (7 if "weekly" in board else 1))


def test_a_board_grows_bucket_by_bucket_to_thousands_of_players(redis_client, redis_url, namespace):
    boards = Boards(redis_client, redis_url, namespace)
    rng = random.Random(7)
    try:
        for _ in range(6):
            rows = [("g", "all", f"player-{i}", rng.randrange(50), rng.randrange(10**12))
                    for i in rng.sample(range(6000), 1500)]
            boards.publish(rows, [])
            boards.check(rng, listpacks=True)  # seeded: no bucket's size is left to chance
        assert int(redis_client.get(boards.keys.board("g", "all")[1])) > 64
    finally:
        boards.publisher.close()


def test_a_generation_in_another_layout_is_refused_with_what_to_do(redis_client, redis_url, namespace):
    boards = Boards(redis_client, redis_url, namespace)
    try:
        boards.publish([("g", "all", "ana", 5, 10)], [])
        assert redis_client.get(boards.keys.boards_layout) == LAYOUT.encode()
        redis_client.delete(boards.keys.boards_layout)  # as an older rankflow left it
        with pytest.raises(RedisBoardsLayout, match=r"layout 1.*rankflow rebuild --flow boards"):
            boards.publish([("g", "all", "bo", 6, 11)], [])
        with pytest.raises(RedisBoardsLayout, match="layout 1"):
            BoardReader(redis_client, namespace).player("g", "all", "ana")
        redis_client.set(boards.keys.boards_layout, "2")  # buckets on every board, as rankflow before layout 3
        with pytest.raises(RedisBoardsLayout, match=r"layout 2.*rankflow rebuild --flow boards"):
            boards.publish([("g", "all", "bo", 6, 11)], [])
        with pytest.raises(RedisBoardsLayout, match="layout 2"):
            BoardReader(redis_client, namespace).player("g", "best", "ana")
    finally:
        boards.publisher.close()


def test_the_cli_reader_says_in_one_line_what_to_do_with_an_older_layout(redis_client, redis_url, namespace):
    from tests.cli.test_cli import cli

    boards = Boards(redis_client, redis_url, namespace)
    try:
        boards.publish([("g", "all", "ana", 5, 10)], [])
    finally:
        boards.publisher.close()
    redis_client.delete(boards.keys.boards_layout)
    done = cli("boards", "top", "--game", "g", "--board", "all", "--namespace", namespace, "--redis", redis_url)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"rankflow: {layout_message('1')}"]


EDGES = {"best": (0, 10_000, 0, 253402300799999), "daily:2027-01-06": (0, keyed("daily:2027-01-06").cap, 1799193600000,
                                                                1799193600000 + 86_400_000 - 1),
         "weekly:2027-W01": (0, keyed("weekly:2027-W01").cap, 1799020800000, 1799020800000 + 7 * 86_400_000 - 1)}


@pytest.mark.parametrize("board", sorted(EDGES))
def test_a_keyed_board_is_exact_at_the_ends_of_its_range(redis_client, redis_url, namespace, board):
    low, high, first, last = EDGES[board]
    scores, times = (low, low + 1, high // 2, high - 1, high), (first, first + 1, last - 1, last)
    rows = [("g", board, f"{name}{i}", score, at) for i, (score, at) in
            enumerate((s, t) for s in scores for t in times) for name in ("a", "b", "é")]
    boards = Boards(redis_client, redis_url, namespace)
    try:
        boards.publish(rows, [])
        boards.check(random.Random(1))
        ordered = in_order(boards.model[("g", board)])
        distinct = sorted({score for _, score, _ in ordered}, reverse=True)
        reader = BoardReader(redis_client, namespace)
        for player, score, _ in ordered:
            answer = reader.player("g", board, player, ties="dense")
            assert answer["rank"] == distinct.index(score) + 1
        top, after = reader.top("g", board, 7, after=""), []
        while "next" in top:
            after += top["items"]
            top = reader.top("g", board, 7, after=top["next"])
        assert [i["player_id"] for i in after + top["items"]] == [p for p, _, _ in ordered]
        assert reader.score_for_percentile("g", board, "50")["score"] == ordered[len(ordered) // 2 - 1][1]
        r = len(ordered) // 2  # dense: the r-th distinct score (the last if fewer), stepping group by group
        assert reader.score_for_percentile("g", board, "50", ties="dense")["score"] == distinct[min(r, len(distinct)) - 1]
        assert reader.score_for_percentile("g", board, "96.66", ties="dense")["score"] == distinct[1]  # r = 2
    finally:
        boards.publisher.close()


def test_a_period_total_above_its_key_is_refused_not_misordered():
    week = keyed("weekly:2027-W01")
    assert week is not None
    with pytest.raises(BoardScoreTooHigh, match="8585740287"):
        week.score(week.cap + 1, week.origin)


@settings(max_examples=200, deadline=None)
@given(board=st.sampled_from(["best", "daily:2027-01-06", "weekly:2027-W01"]),
       entries=st.dictionaries(st.text(max_size=8), st.tuples(st.integers(0, 10_000), st.integers(0, 86_399_999)),
                               max_size=30))
def test_the_native_keyed_scores_are_each_entrys_score(board: str, entries: dict[str, tuple[int, int]]) -> None:
    """``KeyedBoard.scores_json`` (the kernel's ``keyed_scores``) reads back, through JSON, as
    :meth:`KeyedBoard.score` of every entry exactly, whatever the player's characters."""
    codec = keyed(board)
    assert codec is not None
    placed = {p: (s, codec.origin + t) for p, (s, t) in entries.items()}
    assert orjson.loads(codec.scores_json(placed)) == {p: codec.score(s, t) for p, (s, t) in placed.items()}
    assert json.loads(codec.scores_json(placed)) == {p: codec.score(s, t) for p, (s, t) in placed.items()}
    if placed:
        player = next(iter(placed))
        with pytest.raises(BoardScoreTooHigh):
            codec.scores_json({**placed, player: (codec.cap + 1, codec.origin)})
