"""Reading a board: top, one player, around a player, each from one snapshot.

Every query is one Lua script (``scripts.READ_BOARD``), so the snapshot id, its
``published_at`` (``connectors.snapshot_age``: with ``age_ms``, its age when answered), the
player count and every item of an answer come from the same state: the publish
script changes a board and the snapshot id in one atomic step. Ranks are exact for
every player: ``ZRANK`` of the player's member is the rank - 1 (docs/semantics/boards.md 4, see
``scripts.PUBLISH_BOARDS``), and ``ZCOUNT`` of the strictly better scores gives the
competition rank.

A board is "no such board" (:class:`NoSuchBoard`) only in a usable snapshot, and the message
lists what there is instead (:func:`missing_board`: the game's boards, or the games, a few
dozen at most), read only then, so a user who misspelt a name sees the right one: while the
generation has no snapshot id (nothing published yet, or Redis lost its data) every
query raises :class:`NoBoardsSnapshot` instead, whatever the board (docs/boards.md,
"When Redis has no usable boards snapshot").

One round trip per query in the common case: the reader remembers the generation and
what each alias last resolved to, and passes them to the script as guesses; the
script checks both (a rebuild may switch the generation, a snapshot may move an
alias) and says what they are now, and only then is it called again.

The same query logic serves two readers: :class:`BoardReader` on a sync
``redis.Redis`` (the CLI, tests) and :class:`AsyncBoardReader` on ``redis.asyncio``
(the HTTP service, whose event loop must never wait on Redis). :class:`BoardQuery`
holds everything but the call itself, and the ``*_answer`` functions turn a reply
into the answer dict, so the two readers differ only in ``await``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, cast

import orjson
import redis
import redis.asyncio as aioredis

from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.board_layout import (LAYOUT, RedisBoardsLayout, cursor_key, entries_of, layout_message,
                                             player_hash, score_of)
from rankflow.connectors.board_pages import (Cursor, check_ties, hundredths, page_answer, percentile, restyle,
                                             styled_rank, top_ask, within_percent)
from rankflow.connectors.board_groups import SUFFIX, game_of, split
from rankflow.connectors.read_hint import GenerationHint
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_replies import Hash, Scored
from rankflow.connectors.script_query import ScriptReader, arun, run
from rankflow.connectors.scripts import MOVES, READ_BOARD, Call
from rankflow.connectors.snapshot_age import published, stamp
from rankflow.state.board_rules import FINAL
from rankflow.state.score_events import MAX_ID_CHARS

MAX_N = 1000
MAX_R = 50
MAX_PLAYERS = 1000
"""Players one scoped ranks query may name (``ranks``): one script call, about a millisecond of Redis."""
ALIASES = ("daily", "weekly")
ATTEMPTS = MOVES + 2
"""Calls of one query at most: a generation switch or an alias move costs one more each."""
MAX_REMEMBERED_ALIASES = 10_000
"""Alias guesses kept per reader (two per game): past this they are forgotten at once."""

BOARD_PATTERN = re.compile(r"(all|best|daily|weekly|(final:)?(daily:[0-9]{4}-[0-9]{2}-[0-9]{2}|weekly:[0-9]{4}-W[0-9]{2}"
                           r"|season:[A-Za-z0-9_.-]{1,32}))(" + SUFFIX + ")?")
"""A board name or alias, and a group's (``@FIELD=VALUE`` after it, ``connectors.board_groups``). ASCII
digits only (``\\d`` would take any Unicode digit): the HTTP routes publish it as their OpenAPI pattern
(``api.schemas_boards``), where ``\\d`` means ASCII digits."""


class BoardQueryError(LookupError):
    """A query that has no answer: the board does not exist, or the player is not on it."""


class NoSuchBoard(BoardQueryError):
    pass


class NoBoardsSnapshot(BoardQueryError):
    """Redis has no usable boards snapshot: its generation has no snapshot id (nothing published
    yet, or Redis lost its data and no run has published since). A board missing then is not
    known not to exist: readers answer "not published" (HTTP ``503``), never "no such board".

    ``last``: the answer this process gave to the same query from the last snapshot it had, if it
    keeps one (the in-process mirror, ``api.board_mirror``); served marked stale."""

    def __init__(self, message: str, last: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.last = last


def no_snapshot(namespace: str) -> str:
    """What :class:`NoBoardsSnapshot` says, as the listeners' "no usable ranking in namespace ..."."""
    return f"no usable boards snapshot in namespace {namespace!r}: nothing published yet, or Redis lost its data"


class NotOnBoard(BoardQueryError):
    pass


class SinceNotRetained(BoardQueryError):
    """``since`` names a basis the board's rank change does not keep (docs/semantics/boards.md 5.6):
    the message names those it keeps (HTTP ``409``: the retained ones move with every snapshot). A
    final keeps none: it has no rank change."""


DAY_START = "day-start"
SINCE = re.compile(r"day-start|[0-9]{1,19}")
"""``since``'s values: the day start, or a snapshot id (a decimal of at most 19 digits)."""


def check_since(since: str | None, board: str) -> str:
    """``since`` as the read script takes it ('' none, ``day`` the day start, or a snapshot id's
    decimal); a usage error (ValueError) for any other value; :class:`SinceNotRetained` on a final,
    which has no rank change (said before Redis is asked).

    >>> check_since(None, "all"), check_since("day-start", "daily"), check_since("0042", "all")
    ('', 'day', '42')
    >>> check_since("yesterday", "all")
    Traceback (most recent call last):
    ...
    ValueError: since must be day-start or a snapshot id, got 'yesterday'
    """
    if since is None:
        return ""
    if not SINCE.fullmatch(since):
        shown = since if len(since) <= 40 else since[:40] + "..."
        raise ValueError(f"since must be {DAY_START} or a snapshot id, got {shown!r}")
    if board.startswith(FINAL):
        raise SinceNotRetained(f"{board} is final standings, which have no rank change: since applies to the live "
                               "boards")
    return "day" if since == DAY_START else str(int(since))


def not_retained(game: str, board: str, since: str, reply: list[Any]) -> SinceNotRetained:
    """The read script's refusal of ``since`` (``scripts.READ_BOARD``) as the error naming what is kept."""
    last, day, marker = (part.decode() for part in reply[1:4])
    asked = DAY_START if since == "day" else f"snapshot {since}"
    if not marker:
        return SinceNotRetained(f"{game}/{board} keeps no rank change: the flow runs without --rank-change, "
                                f"so since={DAY_START if since == 'day' else since} has nothing to count from")
    kept = []
    if day:
        start = day.split(" ")[1]
        kept.append(f"{DAY_START} (snapshot {start})" if start else f"{DAY_START} (before the first snapshot)")
        if start:
            kept.append(f"{start} (the day start)")
    if last:
        kept.append(f"{last} (the snapshot before the board's last change)")
    told = "; it keeps " + ", ".join(kept) if kept else ""
    if not day:
        told += (f"; the day start is not kept: rank change is kept from snapshot {marker}, after the game's day "
                 "began")
    return SinceNotRetained(f"the rank change of {game}/{board} since {asked} is not retained{told}")


MAX_LISTED = 20
"""Names a "no such board" message lists at most (then "and N more"): games may be thousands."""


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def queue_listing(pipe: Any, keys: Any) -> None:
    """Queue on ``pipe`` (a sync or an async pipeline) what :func:`listing_of` reads: the
    generation, the snapshot id, the boards and the aliases, in one transaction."""
    pipe.get(keys.generation)
    pipe.get(keys.snapshot_id)
    pipe.smembers(keys.boards)
    pipe.hgetall(keys.aliases)


def listing_of(g: Any, replies: list[Any]) -> dict[str, Any] | None:
    """The boards' listing (:func:`boards_answer`) of :func:`queue_listing`'s ``replies`` when they
    are of the generation ``g`` (a read hint) names; None, with ``g`` moved to the one read, when
    a rebuild switched generations in between (read again)."""
    generation, sid, names, aliases = replies
    if int(generation or 0) != g.generation:
        g.generation = int(generation)
        return None
    if sid is None:
        raise NoBoardsSnapshot(no_snapshot(g.keys.namespace))
    return boards_answer(sid, names, aliases)


def missing_board(game: str, board: str, listing: dict[str, Any]) -> str:
    """What :class:`NoSuchBoard` says, given the boards there are (:func:`games_answer`'s shape):
    the game's boards when the game exists, else the games.

    >>> listing = games_answer(7, [("g1", "all"), ("g1", "daily:2027-01-04"), ("g3", "all")],
    ...                        {"g1": ["2027-01-04", None]})
    >>> missing_board("g1", "weekly", listing)
    "no board 'weekly' in game 'g1'; its boards: all, daily:2027-01-04 (daily)"
    >>> missing_board("g2", "all", listing)
    "no game 'g2'; games: g1, g3"
    >>> missing_board("g3", "all@region=eu", listing)
    "no board 'all@region=eu' in game 'g3'; its boards: all; it has no group boards (a run with --group-by FIELD makes them)"
    """
    games = listing["games"]
    if game not in games:
        return f"no game {game!r}; games: {_listed(list(games))}" if games else f"no game {game!r}: no game has a board yet"
    entry = games[game]
    named = {concrete: alias for alias, concrete in entry["aliases"].items() if concrete}
    for group, aliases in entry.get("groups", {}).items():
        named.update({concrete: f"{alias}@{group}" for alias, concrete in aliases.items() if concrete})
    boards = [f"{name} ({named[name]})" if name in named else name for name in entry["boards"]]
    told = f"no board {board!r} in game {game!r}; its boards: {_listed(boards)}"
    if "@" in board:  # a group's: name the groups there are (another field, another value)
        groups = list(entry.get("groups", {}))
        told += (f"; its groups: {_listed(groups)}" if groups
                 else "; it has no group boards (a run with --group-by FIELD makes them)")
    return told


class BoardsMoving(RuntimeError):
    """The generation or an alias changed at every call of one query: give up (a
    rebuild switching in a loop?); the caller may ask again."""


def check_board(board: str) -> None:
    """A usage error (ValueError) unless ``board`` is a board name or an alias."""
    if not BOARD_PATTERN.fullmatch(board):
        raise ValueError(f"unknown board {board!r}: all, best, daily, weekly, daily:YYYY-MM-DD, weekly:YYYY-Www, "
                         "season:NAME, or final: and a period's board; any of them @FIELD=VALUE for a group's")


def check_n(n: int) -> None:
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n must be between 1 and {MAX_N}, got {n}")


def check_r(r: int) -> None:
    if not 0 <= r <= MAX_R:
        raise ValueError(f"r must be between 0 and {MAX_R}, got {r}")


def check_players(players: object) -> list[str]:
    """The players of a scoped ranks query (docs/semantics/boards.md 5.4), each once in the order first
    asked; a usage error (ValueError) unless ``players`` is a list of at most :data:`MAX_PLAYERS` ids of
    1 to 64 characters: an id no result can hold is the caller's mistake, not a player who is absent.

    >>> check_players(["bo", "ana", "bo"])
    ['bo', 'ana']
    >>> check_players(["ana", 7])
    Traceback (most recent call last):
    ...
    ValueError: players[1] must be a player id (a string of 1 to 64 characters), got 7
    """
    if not isinstance(players, list):
        raise ValueError(f"players must be a list of player ids, got {type(players).__name__}")
    if len(players) > MAX_PLAYERS:
        raise ValueError(f"at most {MAX_PLAYERS} players per query, got {len(players)}")
    for i, player in enumerate(players):
        if not isinstance(player, str) or not 1 <= len(player) <= MAX_ID_CHARS:
            shown = repr(player if not isinstance(player, str) or len(player) <= 80 else player[:80] + "...")
            raise ValueError(f"players[{i}] must be a player id (a string of 1 to {MAX_ID_CHARS} characters), "
                             f"got {shown}")
    return list(dict.fromkeys(players))


class Reply(NamedTuple):
    """A board query's answer from the script, before it becomes an answer dict."""

    snapshot_id: int
    players: int
    answer: Any  # top: flat member, score pairs; player / around: the script's triple, or None
    board: str  # the concrete board (an alias resolved)
    published_at: int | None = None  # when that snapshot was published (None: an older rankflow's)
    changes: list[bytes] | None = None  # per item its rank change, b'' for a new entry (None: none kept)
    since: bytes | None = None  # the basis of the rank change asked with since (b'': before any snapshot)


class Guesses(GenerationHint):
    """What a reader last learnt about its namespace: the current generation and where
    each ``(game, alias)`` pointed. Only ever a hint: the script checks it."""

    def __init__(self, namespace: str) -> None:
        super().__init__(Keys(boards_namespace(namespace)))
        self.aliases: dict[tuple[str, str], str] = {}

    def learn_alias(self, game: str, alias: str, board: str) -> None:
        if not board:
            self.aliases.pop((game, alias), None)
            return
        if len(self.aliases) >= MAX_REMEMBERED_ALIASES:
            self.aliases.clear()
        self.aliases[(game, alias)] = board


class BoardQuery:
    """One query's calls of ``scripts.READ_BOARD`` (a ``script_query.Query``): :meth:`call`
    gives the keys and arguments of the next one, :meth:`settle` reads its reply and says
    whether the query is answered (then :attr:`reply` holds it) or must call again."""

    attempts = ATTEMPTS

    def __init__(self, guesses: Guesses, game: str, board: str, query: str, arg: int, player: str = "",
                 ties: str | None = None, cursor: Cursor | None = None, since: str | None = None) -> None:
        check_board(board)
        self.since = check_since(since, board)  # docs/semantics/boards.md 5.6
        self.asked = game, board  # as the reader named them: a group's board is its game key's (board_groups)
        game, board, self.suffix = split(game, board)
        self.guesses, self.game, self.board = guesses, game, board
        self.query, self.arg, self.player = query, arg, player
        self.ties, self.cursor = ties or "", cursor  # docs/semantics/boards.md 5.1, 5.3 (connectors.board_pages)
        self.alias = board if board in ALIASES else ""
        self.name = board
        self.reply: Reply | None = None

    def call(self) -> Call:
        g = self.guesses
        keys = g.keys.of_generation(g.generation)
        guess = ""
        if self.alias:
            # Without a guess the alias names the key itself: no board has it (boards
            # are all, best, daily:D, weekly:W), so the script says where the alias
            # points, or, if it points nowhere, reads an empty board: no such board.
            guess = g.aliases.get((self.game, self.alias), "")
            self.name = guess or self.alias
        zset, hashed = keys.board(self.game, self.name)
        cursor_score, cursor_member = ("", b"") if self.cursor is None else cursor_key(self.name, *self.cursor)
        return READ_BOARD.ordered(
            {"generation": keys.generation, "snapshot_id": keys.snapshot_id, "aliases": keys.aliases,
             "board": zset, "reached_at": hashed, "boards_layout": keys.boards_layout,
             "published_at": keys.published_at, "rank_change": keys.rank_change},
            {"generation": g.generation, "alias": self.alias, "guess": guess, "query": self.query, "n": self.arg,
             "player": self.player, "game": self.game, "layout": LAYOUT, "player_hash": player_hash(self.player),
             "ties": self.ties, "cursor_score": cursor_score, "cursor_member": cursor_member,
             "since": self.since})

    def settle(self, reply: list[Any]) -> bool:
        tag = reply[0]
        if tag == b"moved":
            self.guesses.generation = int(reply[1])
            return False
        if tag == b"layout":
            raise RedisBoardsLayout(layout_message(reply[1].decode()))
        if tag == b"alias":
            self.guesses.learn_alias(self.game, self.alias, reply[1].decode())
            return False
        if tag == b"since":
            raise not_retained(self.asked[0], self.name + self.suffix, self.since, reply)
        sid, at, players = reply[1], reply[2], int(reply[3])
        if not sid:  # the publish script writes the id with the boards: without it, none are usable
            raise NoBoardsSnapshot(no_snapshot(self.guesses.keys.namespace))
        if players == 0:
            raise NoSuchBoard(f"no such board: {self.asked[0]}/{self.name}{self.suffix}")
        self.reply = Reply(int(sid), players, reply[4] if len(reply) > 4 else None, self.name + self.suffix,
                           published(at),
                           reply[5] if len(reply) > 5 else None, reply[6] if self.since and len(reply) > 6 else None)
        return True

    def gave_up(self) -> BoardsMoving:
        return BoardsMoving("the boards kept changing generation or aliases while being read; try again")


class RanksQuery(BoardQuery):
    """A scoped ranks query: :class:`BoardQuery`'s call with each player and its CRC-32 after
    the fixed arguments (``scripts.READ_BOARD``'s ``ranks``)."""

    def __init__(self, guesses: Guesses, game: str, board: str, players: list[str], ties: str | None = None,
                 since: str | None = None) -> None:
        super().__init__(guesses, game, board, "ranks", 0, ties=ties, since=since)
        self.players = players
        self._more = [x for player in players for x in (player, player_hash(player))]

    def call(self) -> Call:
        call = super().call()
        return Call(call.keys, call.args + self._more)


def answer_of(query: BoardQuery) -> Reply:
    """The reply of a query that :func:`run` or :func:`arun` returned: it is settled."""
    assert query.reply is not None
    return query.reply


def top_answer(game: str, reply: Reply, ties: str | None = None) -> dict[str, Any]:
    return {**stamp(reply.snapshot_id, reply.published_at), "game_id": game, "board": reply.board,
            "total_players": reply.players,
            "items": restyle(_items(reply.board, reply.answer, 1, 1, reply.changes), ties)}


def with_since(answer: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """``answer`` naming the snapshot its rank changes count from when the query asked ``since``
    (``since_snapshot_id``, null for the day start of a board's first snapshot, 5.6)."""
    if reply.since is not None:
        answer["since_snapshot_id"] = int(reply.since) if reply.since else None
    return answer


def with_rank_change(item: dict[str, Any], change: bytes | int | None) -> dict[str, Any]:
    """``item`` with its ``rank_change`` (docs/semantics/boards.md 5.5) when there is one: none
    for an entry new since the board's previous change (``b''``) or when no moves are kept."""
    if change is not None and change != b"":
        item["rank_change"] = int(change)
    return item


def player_answer(game: str, player: str, reply: Reply, ties: str | None = None) -> dict[str, Any]:
    if not reply.answer:
        raise NotOnBoard(f"{player} is not on {game}/{reply.board}")
    score, rank, better, *dense = reply.answer
    answer = {**stamp(reply.snapshot_id, reply.published_at), "game_id": game, "board": reply.board,
              "player_id": player, "score": score_of(reply.board, score), "rank": int(rank) + 1,
              "competition_rank": int(better) + 1}
    answer["rank"] = styled_rank(ties, answer["rank"], answer["competition_rank"], int(dense[0]) if dense else 0)
    answer["percentile"] = percentile(answer["rank"], reply.players)
    return with_rank_change(answer, reply.changes[0] if reply.changes else None)


def around_answer(game: str, player: str, reply: Reply, ties: str | None = None) -> dict[str, Any]:
    if not reply.answer:
        raise NotOnBoard(f"{player} is not on {game}/{reply.board}")
    start, better, flat, *dense = reply.answer
    return {**stamp(reply.snapshot_id, reply.published_at), "game_id": game, "board": reply.board,
            "items": restyle(_items(reply.board, flat, int(start) + 1, int(better) + 1, reply.changes), ties,
                             int(dense[0]) if dense else 0)}


def _cursors(board: str, flat: list[bytes]) -> Callable[[int], Cursor]:
    """The cursor of the i-th ``member, score`` pair of ``flat``, from ``board``."""
    entry = entries_of(board)

    def cursor_of(i: int) -> Cursor:
        player, score, reached_at = entry(flat[2 * i], flat[2 * i + 1])
        return Cursor(score, reached_at, player)
    return cursor_of


def first_page_answer(game: str, reply: Reply, ties: str | None, n: int, share: int | None) -> dict[str, Any]:
    """A top asked with an empty ``after``: the first page, with its ``next``."""
    top = top_answer(game, reply, ties)
    return page_answer(top, reply.players, 0, top["items"], n, share, _cursors(reply.board, reply.answer))


def after_answer(game: str, reply: Reply, ties: str | None, n: int, share: int | None = None,
                 player: str | None = None) -> dict[str, Any]:
    """The page of ``n`` after a cursor (``after``), or the page ``player`` is on (``page``)."""
    if player is not None and not reply.answer:
        raise NotOnBoard(f"{player} is not on {game}/{reply.board}")
    start, better, flat, *dense = reply.answer
    items = restyle(_items(reply.board, flat, int(start) + 1, int(better) + 1, reply.changes), ties,
                    int(dense[0]) if dense else 0)
    answer: dict[str, Any] = {**stamp(reply.snapshot_id, reply.published_at), "game_id": game, "board": reply.board}
    if player is not None:
        answer["player_id"] = player
        answer["page"] = int(start) // n + 1
    return page_answer(answer, reply.players, int(start), items, n, share, _cursors(reply.board, flat))


def percent_top_answer(game: str, reply: Reply, ties: str | None, share: int) -> dict[str, Any]:
    """``top?percentile=P``: the first items within the top ``share`` hundredths of a percent."""
    top = top_answer(game, reply, ties)
    top["items"] = within_percent(top["items"], reply.players, share)
    return top


def score_answer(game: str, reply: Reply, share: int) -> dict[str, Any]:
    """``score-for-percentile``: the least score of the entries at percentile ``share`` (hundredths)
    or above; null when no entry is."""
    score = None if not reply.answer else score_of(reply.board, reply.answer[1])
    return {**stamp(reply.snapshot_id, reply.published_at), "game_id": game, "board": reply.board,
            "total_players": reply.players, "percentile": share / 100, "score": score}


Answering = tuple[BoardQuery, Callable[[Reply], dict[str, Any]]]
"""A query to run and what makes its reply the answer."""


def top_query(guesses: Guesses, game: str, board: str, n: int, after: str | None, ties: str | None,
              percent: str | None, since: str | None = None) -> Answering:
    """A top's query and answer: as today, a page (``after``: a cursor, or '' for the first page,
    docs/semantics/boards.md 5.1) or the top P percent (``percent``, 5.2); every usage error raised
    before Redis is asked."""
    check_n(n)
    check_ties(ties)
    ask = top_ask(after, percent)
    if ask.kind == "after":
        return (BoardQuery(guesses, game, board, "after", ask.reads(n), ties=ties, cursor=ask.cursor, since=since),
                lambda r: with_since(after_answer(game, r, ties, n, ask.share), r))
    if ask.kind == "first":
        return (BoardQuery(guesses, game, board, "top", ask.reads(n), since=since),
                lambda r: with_since(first_page_answer(game, r, ties, n, ask.share), r))
    if ask.share is not None:
        share = ask.share
        return (BoardQuery(guesses, game, board, "top", n, since=since),
                lambda r: with_since(percent_top_answer(game, r, ties, share), r))
    return BoardQuery(guesses, game, board, "top", n, since=since), lambda r: with_since(top_answer(game, r, ties), r)


def page_query(guesses: Guesses, game: str, board: str, player: str, n: int, ties: str | None,
               since: str | None = None) -> Answering:
    """The page of ``n`` a player is on (docs/semantics/boards.md 5.1)."""
    check_n(n)
    check_ties(ties)
    return (BoardQuery(guesses, game, board, "page", n, player, ties=ties, since=since),
            lambda r: with_since(after_answer(game, r, ties, n, player=player), r))


def score_query(guesses: Guesses, game: str, board: str, percent: str, ties: str | None) -> Answering:
    """The score at a percentile (docs/semantics/boards.md 5.2)."""
    check_ties(ties)
    share = hundredths(percent)
    return BoardQuery(guesses, game, board, "at", share, ties=ties), lambda r: score_answer(game, r, share)


def ranks_answer(game: str, players: list[str], reply: Reply, ties: str | None = None) -> dict[str, Any]:
    """The script's ``ranks`` reply as :func:`scoped_ranks` gives it (``ties``: 5.3's style of ``rank``; each
    item's ``rank_change`` when the board keeps its moves, 5.5, and the basis asked with ``since``, 5.6)."""
    rows, absent = [], []
    changes = iter(reply.changes or ())
    moved: dict[str, bytes] = {}
    for player, found in zip(players, reply.answer):
        if found:
            score, rank, better, *dense = found
            rank, competition = int(rank) + 1, int(better) + 1
            shown = styled_rank(ties, rank, competition, int(dense[0]) if dense else 0)
            rows.append((player, score_of(reply.board, score), rank, competition, shown))
            if reply.changes:
                moved[player] = next(changes)
        else:
            absent.append(player)
    return with_since(scoped_ranks(stamp(reply.snapshot_id, reply.published_at), game, reply.board, reply.players,
                                   rows, absent, moved or None), reply)


def scoped_ranks(stamped: dict[str, Any], game: str, board: str, players: int,
                 rows: list[tuple[str, int, int, int, int]], absent: list[str],
                 changes: dict[str, bytes] | None = None) -> dict[str, Any]:
    """``POST /boards/{game}/{board}/ranks``'s answer (docs/semantics/boards.md 5.4), from Redis or the
    mirror alike: ``rows`` the ``(player, score, rank, competition rank, rank shown)`` of the players on the
    board (any order; the rank shown is the tie style's, 5.3), ``absent`` the others in the order asked; items
    in board order, ``rank_in_set`` their place among the players asked for; ``changes`` (Redis's, with
    ``--rank-change``) each player's ``rank_change`` as the script gave it (5.5).

    >>> scoped_ranks({"snapshot_id": 9}, "g1", "all", 5, [("eve", 0, 5, 5, 5), ("bo", 50, 2, 1, 2)], ["zed"])["items"]
    [{'rank': 2, 'competition_rank': 1, 'rank_in_set': 1, 'player_id': 'bo', 'score': 50}, {'rank': 5, 'competition_rank': 5, 'rank_in_set': 2, 'player_id': 'eve', 'score': 0}]
    """
    items = [{"rank": shown, "competition_rank": competition, "rank_in_set": i, "player_id": player, "score": score}
             for i, (player, score, _, competition, shown) in enumerate(sorted(rows, key=lambda row: row[2]), start=1)]
    if changes is not None:
        for item in items:
            with_rank_change(item, changes.get(str(item["player_id"])))
    return {**stamped, "game_id": game, "board": board, "total_players": players, "items": items, "absent": absent}


class BoardReader(ScriptReader[redis.Redis, Guesses]):
    """Board queries of one namespace (the boards flow's, :func:`boards_namespace`), on a sync client."""

    hint_type = Guesses
    source = READ_BOARD

    def top(self, game: str, board: str, n: int = 10, *, after: str | None = None, ties: str | None = None,
            percentile: str | None = None, since: str | None = None) -> dict[str, Any]:
        query, answer = top_query(self.hint, game, board, n, after, ties, percentile, since)
        return answer(self._query(query))

    def player(self, game: str, board: str, player: str, *, ties: str | None = None,
               since: str | None = None) -> dict[str, Any]:
        check_ties(ties)
        reply = self._query(BoardQuery(self.hint, game, board, "player", 0, player, ties, since=since))
        return with_since(player_answer(game, player, reply, ties), reply)

    def around(self, game: str, board: str, player: str, r: int = 5, *, ties: str | None = None,
               since: str | None = None) -> dict[str, Any]:
        check_r(r)
        check_ties(ties)
        reply = self._query(BoardQuery(self.hint, game, board, "around", r, player, ties, since=since))
        return with_since(around_answer(game, player, reply, ties), reply)

    def page(self, game: str, board: str, player: str, n: int = 10, *, ties: str | None = None,
             since: str | None = None) -> dict[str, Any]:
        query, answer = page_query(self.hint, game, board, player, n, ties, since)
        return answer(self._query(query))

    def score_for_percentile(self, game: str, board: str, p: str, *, ties: str | None = None) -> dict[str, Any]:
        query, answer = score_query(self.hint, game, board, p, ties)
        return answer(self._query(query))

    def ranks(self, game: str, board: str, players: list[str], *, ties: str | None = None,
              since: str | None = None) -> dict[str, Any]:
        """The ranks of ``players`` on a board, among all and among themselves (:func:`scoped_ranks`)."""
        players = check_players(players)
        check_ties(ties)
        return ranks_answer(game, players, self._query(RanksQuery(self.hint, game, board, players, ties, since)),
                            ties)

    def boards(self) -> dict[str, Any]:
        """Every game's boards and aliases, from one snapshot: :meth:`AsyncBoardReader.boards`."""
        for _ in range(ATTEMPTS):
            g = self.hint
            keys = g.keys.of_generation(g.generation)
            pipe = self.client.pipeline(transaction=True)
            queue_listing(pipe, keys)
            if (listing := listing_of(g, pipe.execute())) is not None:
                return listing
        raise BoardsMoving("the boards kept changing generation while being read; try again")

    def sizes(self) -> dict[str, Any]:
        """Every board with its player count, from one snapshot: :func:`sizes_answer` (``rankflow boards list``)."""
        for _ in range(ATTEMPTS):
            listing = self.boards()
            keys = self.hint.keys.of_generation(self.hint.generation)
            pairs = [split(game, board)[:2] for game, entry in listing["games"].items() for board in entry["boards"]]
            pipe = self.client.pipeline(transaction=True)
            pipe.get(keys.generation)
            pipe.get(keys.snapshot_id)
            for game, board in pairs:
                pipe.zcard(keys.board(game, board)[0])
            generation, sid, *players = pipe.execute()
            if int(generation or 0) == self.hint.generation and sid is not None and int(sid) == listing["snapshot_id"]:
                return sizes_answer(listing, players)
        raise BoardsMoving("the boards kept changing while being read; try again")

    def _query(self, query: BoardQuery) -> Reply:
        try:
            return answer_of(run(self.script, query))
        except NoSuchBoard:
            raise NoSuchBoard(missing_board(*query.asked, self.boards())) from None


class AsyncBoardReader(ScriptReader[aioredis.Redis, Guesses]):
    """:class:`BoardReader` on a ``redis.asyncio`` client: the same queries and answers."""

    hint_type = Guesses
    source = READ_BOARD

    async def top(self, game: str, board: str, n: int = 10, *, after: str | None = None, ties: str | None = None,
                  percentile: str | None = None, since: str | None = None) -> dict[str, Any]:
        query, answer = top_query(self.hint, game, board, n, after, ties, percentile, since)
        return answer(await self._query(query))

    async def player(self, game: str, board: str, player: str, *, ties: str | None = None,
                     since: str | None = None) -> dict[str, Any]:
        check_ties(ties)
        reply = await self._query(BoardQuery(self.hint, game, board, "player", 0, player, ties, since=since))
        return with_since(player_answer(game, player, reply, ties), reply)

    async def around(self, game: str, board: str, player: str, r: int = 5, *,
                     ties: str | None = None, since: str | None = None) -> dict[str, Any]:
        check_r(r)
        check_ties(ties)
        reply = await self._query(BoardQuery(self.hint, game, board, "around", r, player, ties, since=since))
        return with_since(around_answer(game, player, reply, ties), reply)

    async def page(self, game: str, board: str, player: str, n: int = 10, *,
                   ties: str | None = None, since: str | None = None) -> dict[str, Any]:
        query, answer = page_query(self.hint, game, board, player, n, ties, since)
        return answer(await self._query(query))

    async def score_for_percentile(self, game: str, board: str, p: str, *,
                                   ties: str | None = None) -> dict[str, Any]:
        query, answer = score_query(self.hint, game, board, p, ties)
        return answer(await self._query(query))

    async def ranks(self, game: str, board: str, players: list[str], *, ties: str | None = None,
                    since: str | None = None) -> dict[str, Any]:
        players = check_players(players)
        check_ties(ties)
        return ranks_answer(game, players,
                            await self._query(RanksQuery(self.hint, game, board, players, ties, since)), ties)

    async def boards(self) -> dict[str, Any]:
        """Every game's boards and aliases, from one snapshot (one ``MULTI``: the publish
        script changes them and the snapshot id in one step); :class:`NoBoardsSnapshot` without one."""
        for _ in range(ATTEMPTS):
            g = self.hint
            keys = g.keys.of_generation(g.generation)
            async with self.client.pipeline(transaction=True) as pipe:
                queue_listing(pipe, keys)
                replies = await pipe.execute()
            if (listing := listing_of(g, replies)) is not None:
                return listing
        raise BoardsMoving("the boards kept changing generation while being read; try again")

    async def _query(self, query: BoardQuery) -> Reply:
        try:
            return answer_of(await arun(self.script, query))
        except NoSuchBoard:
            raise NoSuchBoard(missing_board(*query.asked, await self.boards())) from None


def ordered_boards(boards: list[str]) -> list[str]:
    """``all``, ``best``, then the daily periods, then the weekly ones, each newest first.

    >>> ordered_boards(["weekly:2027-W01", "daily:2027-01-03", "best", "daily:2027-01-04", "all"])
    ['all', 'best', 'daily:2027-01-04', 'daily:2027-01-03', 'weekly:2027-W01']
    """
    newest_first = sorted(boards, reverse=True)
    return sorted(newest_first, key=_board_order)  # stable


_KINDS = ("all", "best", "daily", "weekly", "season")


def _board_order(board: str) -> tuple[str, int]:
    """The game's own boards first, then each group's (docs/semantics/boards.md 10), each by kind."""
    at = board.find("@")
    if at < 0:
        return "", _KINDS.index(board.partition(":")[0])
    return board[at:], _KINDS.index(board[:at].partition(":")[0])


def boards_answer(sid: bytes | None, names: set[bytes], aliases: dict[bytes, bytes]) -> dict[str, Any]:
    """``GET /boards``: ``{snapshot_id, games: {game: {boards, aliases: {daily, weekly}}}}``."""
    return games_answer(int(sid) if sid else None, (orjson.loads(name) for name in names),
                        {game.decode(): orjson.loads(periods) for game, periods in aliases.items()})


def games_answer(snapshot_id: int | None, boards: Iterable[tuple[str, str] | list[str]],
                 aliases: dict[str, list[str | None]]) -> dict[str, Any]:
    """:func:`boards_answer` from decoded parts (also the in-process mirror's, ``api.board_mirror``):
    ``boards`` the ``(game, board)`` there are, ``aliases`` per game its ``[daily, weekly]`` periods."""
    games: dict[str, dict[str, Any]] = {}
    for key, board in boards:
        game, suffix = game_of(key)  # a group's boards under their game (docs/semantics/boards.md 10)
        games.setdefault(game, {"boards": [], "aliases": {"daily": None, "weekly": None}})["boards"].append(
            board + suffix)
    for key, periods in aliases.items():
        game, suffix = game_of(key)
        entry = games.get(game)
        if entry is not None:
            named = entry["aliases"]
            if suffix:  # a group's aliases: under "groups", by FIELD=VALUE
                named = entry.setdefault("groups", {}).setdefault(suffix[1:], {"daily": None, "weekly": None})
            for alias, period in zip(ALIASES, periods):
                named[alias] = None if period is None else f"{alias}:{period}{suffix}"
    for entry in games.values():
        entry["boards"] = ordered_boards(entry["boards"])
        if "groups" in entry:
            entry["groups"] = dict(sorted(entry["groups"].items()))
    return {"snapshot_id": snapshot_id, "games": dict(sorted(games.items()))}


def sizes_answer(listing: dict[str, Any], players: list[int]) -> dict[str, Any]:
    """``rankflow boards list``: ``{snapshot_id, boards: [{game_id, board, alias, players}]}``, a row per
    board of ``listing`` (:func:`games_answer`) in its order, ``players`` the boards' sizes in that order;
    ``alias`` is ``daily`` or ``weekly`` for the period an alias names, else null."""
    sizes = iter(players)
    rows = []
    for game, entry in listing["games"].items():
        named = {concrete: alias for alias, concrete in entry["aliases"].items() if concrete}
        for group, aliases in entry.get("groups", {}).items():
            named.update({concrete: f"{alias}@{group}" for alias, concrete in aliases.items() if concrete})
        for board in entry["boards"]:
            rows.append({"game_id": game, "board": board, "alias": named.get(board), "players": int(next(sizes))})
    return {"snapshot_id": listing["snapshot_id"], "boards": rows}


def _items(board: str, flat: list[bytes], first_rank: int, first_competition: int,
           changes: list[bytes] | None = None) -> list[dict[str, Any]]:
    """``member, score`` pairs of ``board`` from ``ZRANGE ... WITHSCORES`` as answer items with both
    ranks (and each one's rank change, ``changes``, when the script answered them)."""
    items: list[dict[str, Any]] = []
    competition, previous = first_competition, None
    rank = first_rank
    entry = entries_of(board)
    for m, s in zip(flat[::2], flat[1::2]):
        player, score, _ = entry(m, s)
        if previous is not None and score != previous:
            competition = rank
        previous = score
        items.append({"rank": rank, "competition_rank": competition, "player_id": player, "score": score})
        rank += 1
    if changes:
        for item, change in zip(items, changes):
            with_rank_change(item, change)
    return items


def read_boards(client: redis.Redis, namespace: str) -> dict[str, dict[str, list[tuple[str, int, int]]]]:
    """Every board of the current generation, whole: ``{game: {board: [(player, score,
    reached_at), ...] in rank order}}``. For tests and benchmarks that compare whole
    boards (not atomic across boards: read it while nothing publishes)."""
    keys = Keys(boards_namespace(namespace))
    keys = keys.of_generation(current_generation(client, keys.namespace))
    out: dict[str, dict[str, list[tuple[str, int, int]]]] = {}
    for name in client.smembers(keys.boards):
        game, board = orjson.loads(name)
        flat = cast(Scored, client.zrange(keys.board(game, board)[0], 0, -1, withscores=True))
        entry = entries_of(board)
        out.setdefault(game, {})[board] = [entry(m, score) for m, score in flat]
    return out


def read_aliases(client: redis.Redis, namespace: str) -> dict[str, dict[str, str | None]]:
    """Each game's ``daily`` and ``weekly`` period in the current generation."""
    keys = Keys(boards_namespace(namespace))
    keys = keys.of_generation(current_generation(client, keys.namespace))
    aliases = cast(Hash, client.hgetall(keys.aliases))
    return {game.decode(): dict(zip(("daily", "weekly"), orjson.loads(periods))) for game, periods in aliases.items()}
