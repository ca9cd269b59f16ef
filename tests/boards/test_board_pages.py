"""Pages with cursors, percentiles and tie styles (docs/semantics/boards.md 5.1 to 5.3) against the model.

Random boards with many ties go through the flow's own publisher (``Publisher``,
``BoardsState``) into a real Redis; then every new query is asked of both readers, the
Redis reader (``connectors.board_read``, the CLI's and ``--board-index redis``) and the
in-process mirror (``api.board_mirror``, ``--board-index memory``), and each answer must
be the reference model's (``tests/boards_model.py``) and the same from both:

* walking the pages from an empty ``after`` by their ``next`` gives the whole board once,
  in order, and the last page has no ``next``; a page after any cursor, the entry it names
  on the board or not, starts after that place; a page asked after the board changed
  continues after the cursor's entry in the new snapshot;
* a player's page, and a player's percentile;
* the top P percent (bounded by n) and the score at percentile P;
* every answer's ``rank`` in each tie style, and without ``ties`` the answers as before.

The mirror's count of distinct scores (dense ranks, and the score at a percentile) is also
checked half-way through change sets, where it reads the boards as the last whole one left
them (``state.board_index.BoardView``). Usage errors are raised before Redis is asked.
"""

from __future__ import annotations

import asyncio
import fractions
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings, strategies as st

from rankflow.api.board_mirror import BoardMirror, distinct_above, nth_distinct
from rankflow.connectors.board_pages import Cursor, decode_cursor, encode_cursor
from rankflow.connectors.board_read import BoardReader, NotOnBoard
from rankflow.state.board_index import BoardsCopy, LiveBoards
from tests import boards_model as model
from tests.api import test_board_mirror as mirror_tests
from tests.boards.test_board_layout import Boards, in_order

GAME, BOARD = "g", "all"
PLAYERS = ["a", "b", "é", "🎮", "clan/zoe", "Z", "ab", "x y"]
TIES = [None, "ordinal", "competition", "dense"]
PERCENTS = ["0", "0.5", "10", "33.33", "50", "99.99", "100"]

entries_st = st.dictionaries(st.sampled_from(PLAYERS + [f"p{i}" for i in range(20)]),
                             st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=28)


def rows(items: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(i["player_id"], i["score"], i["rank"]) for i in items]


def unstamped(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without its age (the two readers answer at different ms)."""
    return {k: v for k, v in answer.items() if k != "age_ms"}


class Both:
    """The same question to the Redis reader and the loaded mirror: one answer (or one refusal)."""

    def __init__(self, reader: BoardReader, mirror: BoardMirror) -> None:
        self.reader, self.mirror = reader, mirror

    def ask(self, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from_redis = getattr(self.reader, name)(*args, **kwargs)
        from_memory = getattr(self.mirror, name)(*args, **kwargs)
        assert unstamped(from_memory) == unstamped(from_redis), (name, args, kwargs)
        return from_redis


def check_board(both: Both, entries: list[tuple[str, int, int]], n: int, cursors: list[Cursor]) -> None:
    total = len(entries)
    for ties in TIES:
        expected = model.styled(entries, ties)
        top = both.ask("top", GAME, BOARD, n, ties=ties)
        assert "next" not in top and top["total_players"] == total and rows(top["items"]) == expected[:n]
        if ties is None:
            ranked = model.rank_and_competition(entries)[:n]
            assert [(i["player_id"], i["score"], i["rank"], i["competition_rank"]) for i in top["items"]] == ranked
        # every page by its next cursor: the board once, in order; the last page says no next
        seen, page = [], both.ask("top", GAME, BOARD, n, after="", ties=ties)
        for expected_page in model.pages(entries, n):
            assert rows(page["items"]) == [row for row in expected if row[0] in {e[0] for e in expected_page}]
            seen += rows(page["items"])
            if "next" not in page:
                break
            page = both.ask("top", GAME, BOARD, n, after=page["next"], ties=ties)
        assert seen == expected and "next" not in page
        # after any place, its entry on the board or not
        for cursor in cursors:
            start = model.after(entries, tuple(cursor))
            page = both.ask("top", GAME, BOARD, n, after=encode_cursor(cursor), ties=ties)
            assert rows(page["items"]) == expected[start:start + n]
            assert ("next" in page) == (start + n < total)
        for player, score, rank in expected:
            mine = both.ask("player", GAME, BOARD, player, ties=ties)
            assert (mine["score"], mine["rank"], mine["percentile"]) == (score, rank, model.percentile(rank, total))
            around = both.ask("around", GAME, BOARD, player, 1, ties=ties)
            at = [row[0] for row in expected].index(player)
            assert rows(around["items"]) == expected[max(0, at - 1):at + 2]
            on = both.ask("page", GAME, BOARD, player, n, ties=ties)
            assert on["page"] == at // n + 1 and on["player_id"] == player
            assert rows(on["items"]) == expected[at - at % n:at - at % n + n]
            assert ("next" in on) == (at - at % n + n < total)
        for percent in PERCENTS:
            exact = fractions.Fraction(percent)
            part = both.ask("top", GAME, BOARD, n, percentile=percent, ties=ties)
            assert rows(part["items"]) == model.top_percent(entries, ties, exact, n)
            # the pages of the top P percent: all of it once, and no next after its last entry
            inside = model.top_percent(entries, ties, exact, total)
            seen, page = [], both.ask("top", GAME, BOARD, n, after="", percentile=percent, ties=ties)
            while True:
                assert len(page["items"]) <= n
                seen += rows(page["items"])
                if "next" not in page:
                    break
                page = both.ask("top", GAME, BOARD, n, after=page["next"], percentile=percent, ties=ties)
            assert seen == inside
            score = both.ask("score_for_percentile", GAME, BOARD, percent, ties=ties)
            assert score["score"] == model.score_for_percentile(entries, ties, exact)
            assert score["percentile"] == float(exact) and score["total_players"] == total


async def loaded_mirror(url: str, namespace: str) -> tuple[BoardMirror, aioredis.Redis]:
    client = aioredis.Redis.from_url(url)
    mirror = BoardMirror(client, namespace)
    await mirror.load()
    return mirror, client


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=entries_st, second=entries_st, n=st.integers(1, 6),
       cursors=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4), st.sampled_from(PLAYERS + ["p3", "zz"])),
                        max_size=4))
def test_pages_percentiles_and_tie_styles_are_the_model_from_both_readers(redis_client, redis_url, first, second, n,
                                                                          cursors):
    namespace = f"t-{uuid.uuid4().hex[:12]}"  # one per example
    boards = Boards(redis_client, redis_url, namespace)
    reader = BoardReader(redis_client, namespace)
    loop = asyncio.new_event_loop()
    try:
        boards.publish([(GAME, BOARD, p, score, at) for p, (score, at) in first.items()], [])
        mirror, client = loop.run_until_complete(loaded_mirror(redis_url, namespace))
        entries = in_order(boards.model[(GAME, BOARD)])
        check_board(Both(reader, mirror), entries, n, [Cursor(*c) for c in cursors])
        # a page asked after the board changed continues after the cursor's entry, in the new snapshot
        page = reader.top(GAME, BOARD, n, after="")
        boards.publish([(GAME, BOARD, p, score, at) for p, (score, at) in second.items()], [])
        loop.run_until_complete(mirror.follow())
        changed = in_order(boards.model[(GAME, BOARD)])
        if "next" in page:
            start = model.after(changed, tuple(decode_cursor(page["next"])))
            later = Both(reader, mirror).ask("top", GAME, BOARD, n, after=page["next"])
            assert rows(later["items"]) == model.styled(changed, None)[start:start + n]
        check_board(Both(reader, mirror), changed, n, [])
        loop.run_until_complete(client.aclose())
    finally:
        boards.publisher.close()
        loop.close()


def test_the_worked_example_in_each_tie_style(redis_client, redis_url, namespace):
    """Section 8's ``all`` (ana, bo, cy, dee 50; eve 0) in the three styles, with percentiles."""
    boards = Boards(redis_client, redis_url, namespace)
    try:
        boards.publish([(GAME, BOARD, "ana", 50, 1), (GAME, BOARD, "bo", 50, 2), (GAME, BOARD, "cy", 50, 3),
                        (GAME, BOARD, "dee", 50, 3), (GAME, BOARD, "eve", 0, 4)], [])
    finally:
        boards.publisher.close()
    reader = BoardReader(redis_client, namespace)
    for ties, ranks in [("ordinal", [1, 2, 3, 4, 5]), ("competition", [1, 1, 1, 1, 5]), ("dense", [1, 1, 1, 1, 2])]:
        assert [i["rank"] for i in reader.top(GAME, BOARD, 10, ties=ties)["items"]] == ranks
    eve = reader.player(GAME, BOARD, "eve", ties="dense")
    assert (eve["rank"], eve["competition_rank"], eve["percentile"]) == (2, 5, 60.0)
    assert reader.player(GAME, BOARD, "eve")["percentile"] == 0.0
    assert reader.player(GAME, BOARD, "ana")["percentile"] == 80.0
    first = reader.top(GAME, BOARD, 2, after="")
    assert [i["player_id"] for i in first["items"]] == ["ana", "bo"]
    assert decode_cursor(first["next"]) == Cursor(50, 2, "bo")
    second = reader.top(GAME, BOARD, 2, after=first["next"])
    assert [i["player_id"] for i in second["items"]] == ["cy", "dee"]
    last = reader.top(GAME, BOARD, 2, after=second["next"])
    assert [i["player_id"] for i in last["items"]] == ["eve"] and "next" not in last
    assert reader.page(GAME, BOARD, "dee", 2)["page"] == 2
    assert reader.score_for_percentile(GAME, BOARD, "50")["score"] == 50
    assert [i["player_id"] for i in reader.top(GAME, BOARD, 10, percentile="40")["items"]] == ["ana", "bo"]
    with pytest.raises(NotOnBoard):
        reader.page(GAME, BOARD, "nobody", 2)


@pytest.mark.parametrize("call", [
    lambda r: r.top(GAME, BOARD, 10, after="not a cursor"),
    lambda r: r.top(GAME, BOARD, 10, after=encode_cursor(Cursor(1, 2, "a")) + "x"),
    lambda r: r.top(GAME, BOARD, 10, after="", percentile="5.5.5"),
    lambda r: r.top(GAME, BOARD, 10, percentile="100.5"),
    lambda r: r.top(GAME, BOARD, 10, percentile="1e1"),
    lambda r: r.top(GAME, BOARD, 10, ties="olympic"),
    lambda r: r.player(GAME, BOARD, "a", ties="Dense"),
    lambda r: r.page(GAME, BOARD, "a", 0),
    lambda r: r.score_for_percentile(GAME, BOARD, "-1"),
])
def test_usage_errors_are_refused_before_redis_is_asked(call):
    """No Redis at all: a usage error is raised before any round trip."""
    import redis

    reader = BoardReader(redis.Redis(port=1), "nowhere")
    with pytest.raises(ValueError):
        call(reader)


# -- the mirror half-way through a change set -------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(raws=mirror_tests.change_sets, steps=st.lists(st.integers(1, 5), max_size=30))
def test_the_mirror_s_distinct_scores_are_the_model_s_between_any_two_slices(raws, steps):
    """``distinct_above`` and ``nth_distinct`` (dense ranks and their percentile scores) on the
    served boards while change sets are half applied: those of the snapshot served."""
    states = mirror_tests.model_states(raws)
    live = LiveBoards(BoardsCopy(0, {}, {}))
    for sid, raw in enumerate(raws, start=1):
        live.add(mirror_tests.as_change_set(sid, raw))
    for size in [*steps, *[1] * 200]:
        boards = states[live.serving.snapshot_id][0]
        for bid, entries in boards.items():
            index = live.serving.board(bid)
            assert index is not None
            ordered = in_order(entries)
            scores = sorted({score for _, score, _ in ordered}, reverse=True)
            for score in range(0, 6):
                assert distinct_above(index, score) == sum(1 for s in scores if s > score)
            for k in range(1, len(scores) + 2):
                assert nth_distinct(index, k) == scores[min(k, len(scores)) - 1]
        if not live.pending:
            break
        live.step(size)
