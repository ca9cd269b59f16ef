"""``rankflow boards list|finals|top|player|around|page|score-for-percentile|ranks``: reading the score boards from the command line.

Each answer is one JSON object with ``--json`` (the same fields as the HTTP API), or
a table. ``list`` shows every game's boards and their sizes, so a user can find the names
to ask for. Pages, percentiles and tie styles (docs/semantics/boards.md 5.1 to 5.3): ``top
--after CURSOR`` (``--after ''`` the first page) prints the next page's cursor, ``top
--percentile P`` the top P percent, ``page`` the page a player is on, ``score-for-percentile``
the least score at a percentile, and ``--ties`` the ranks' style; ``ranks`` the ranks of a set
of players (docs/semantics/boards.md 5.4); ``--since day-start|SNAPSHOT`` on ``top``, ``player``,
``around``, ``page`` and ``ranks`` the rank change since the day's start or a snapshot still retained (5.6,
exit 1 naming the retained ones otherwise); ``finals`` the final standings retention made of dropped
periods (docs/semantics/boards.md 9), each read like a board by its name ``final:BOARD``; a group's
boards (a run with ``--group-by FIELD``, docs/semantics/boards.md 10) by ``BOARD@FIELD=VALUE``. Exit status: 0 an answer, 1 no
such game or board (the message lists the ones there are) or the player is not on it, 2 bad
usage (``-n/--limit`` outside 1..1000, ``-r/--radius`` outside 0..50, an unknown board name, a
cursor no page gave, a percentile outside 0..100 or with more than two decimals, an unknown tie
style, more than 1,000 players or a bad id for ``ranks``, a ``--players-file`` that cannot be read,
a ``--since`` that is neither ``day-start`` nor a snapshot id, or given with a final: never
clamped), said before Redis is asked.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from collections.abc import Callable

import orjson
import redis
from rich.markup import escape

from rankflow.connectors.board_pages import TIES, check_ties, hundredths, top_ask
from rankflow.connectors.board_read import (MAX_PLAYERS, BoardQueryError, BoardReader, NoSuchBoard, check_board,
                                            SinceNotRetained, check_n, check_players, check_r, check_since,
                                            missing_board)
from rankflow.connectors.finals_read import read_finals
from rankflow.cli_format import print_line, print_rows, quantity
from rankflow.cli_help import REDIS, example
from rankflow.cli_query import add_option, answer_query
from rankflow.options import UsageError


def add_parser(sub: Any, add_redis: Callable[[argparse.ArgumentParser], None]) -> None:
    after = "the boards run of `rankflow run --help`"
    examples = {"list": f"rankflow boards list --redis {REDIS}",
                "finals": f"rankflow boards finals --game arena --redis {REDIS}",
                "top": f"rankflow boards top --game arena --board all -n 10 --redis {REDIS}",
                "player": f"rankflow boards player --game arena --board daily --player p000042 --json --redis {REDIS}",
                "around": f"rankflow boards around --game arena --board weekly --player p000042 -r 2 --redis {REDIS}",
                "page": f"rankflow boards page --game arena --board all --player p000042 -n 20 --redis {REDIS}",
                "score-for-percentile": f"rankflow boards score-for-percentile --game arena --board all "
                                        f"--percentile 90 --redis {REDIS}",
                "ranks": f"rankflow boards ranks --game arena --board all --players p000042,p000007 --redis {REDIS}"}
    boards = sub.add_parser("boards", help="read the game score boards (list, top, one player, around a player, "
                                           "a set of players)",
                            epilog=example(*examples.values(), after=after))
    queries = boards.add_subparsers(dest="query", required=True)
    listing = queries.add_parser("list", help="every game's boards, with their players",
                                 epilog=example(examples["list"], after=after))
    listing.add_argument("--game", metavar="G", help="this game's boards only")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    add_redis(listing)
    finals = queries.add_parser("finals", help="the final standings of the periods retention dropped, with the "
                                               "snapshot that closed each: read one with --board final:BOARD",
                                epilog=example(examples["finals"], after=after))
    finals.add_argument("--game", metavar="G", help="this game's finals only")
    finals.add_argument("--json", action="store_true", help="print one JSON object")
    add_redis(finals)
    top = queries.add_parser("top", help="a board's first N entries", epilog=example(examples["top"], after=after))
    player = queries.add_parser("player", help="one player's score and ranks on a board",
                                epilog=example(examples["player"], after=after))
    around = queries.add_parser("around", help="the entries ranked R above to R below a player",
                                epilog=example(examples["around"], after=after))
    page = queries.add_parser("page", help="the page of N entries a player is on, with the next page's cursor",
                              epilog=example(examples["page"], after=after))
    score = queries.add_parser("score-for-percentile", help="the least score at a percentile or above",
                               epilog=example(examples["score-for-percentile"], after=after))
    ranks = queries.add_parser("ranks", help="the ranks of a set of players (friends, a clan) on a board, among all "
                                             "and among themselves", epilog=example(examples["ranks"], after=after))
    for p in (top, player, around, page, score, ranks):
        p.add_argument("--game", required=True, metavar="G")
        p.add_argument("--board", required=True, metavar="B",
                       help="all, best, daily, weekly, daily:YYYY-MM-DD, weekly:YYYY-Www, season:NAME, or final: "
                            "and one of those periods (its final standings); any of them @FIELD=VALUE for a "
                            "group's board (a run with --group-by FIELD), such as weekly@region=eu")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        add_redis(p)
    add_option(top, ("-n", "--limit"), "--n", type=int, default=10, metavar="N",
               help="the first N entries, 1..1000 (default %(default)s)")
    top.add_argument("--after", metavar="CURSOR",
                     help="the N entries after the one this cursor names (a page's next; '' for the first page)")
    top.add_argument("--percentile", metavar="P",
                     help="the top P percent (0..100, two decimals at most), N at most; with --after, its pages")
    add_option(page, ("-n", "--limit"), "--n", type=int, default=10, metavar="N",
               help="entries per page, 1..1000 (default %(default)s)")
    score.add_argument("--percentile", required=True, metavar="P", help="the percentile, 0..100, two decimals at most")
    for p in (top, player, around, page, score, ranks):
        p.add_argument("--ties", metavar="S", help=f"the style of every rank: {', '.join(TIES)} (1234, 1224, 1223); "
                                                   "without it, ordinal ranks and the competition rank beside them")
    for p in (top, player, around, page, ranks):
        p.add_argument("--since", metavar="WHEN",
                       help="rank_change since day-start (the board before the game's day began) or a snapshot id "
                            "still retained, instead of since the board's previous change (a --rank-change run's)")
    for p in (player, around, page):
        p.add_argument("--player", required=True, metavar="P")
    add_option(around, ("-r", "--radius"), "--r", type=int, default=5, metavar="R",
               help="the entries R ranks above and below, 0..50 (default %(default)s)")
    named = ranks.add_mutually_exclusive_group(required=True)
    named.add_argument("--players", metavar="P,P,...", help=f"the players, comma-separated (at most {MAX_PLAYERS})")
    named.add_argument("--players-file", metavar="FILE",
                       help="the players, one per line (blank lines skipped; - reads standard input): ids holding commas")


def cmd_boards(args: argparse.Namespace) -> int:
    if args.query == "list":
        return answer_query(args.redis, args.redis_read, lambda client: list_boards(client, args.namespace, args.game),
                            BoardQueryError, args.json, orjson.dumps, print_list)
    if args.query == "finals":
        return answer_query(args.redis, args.redis_read, lambda client: read_finals(client, args.namespace, args.game),
                            BoardQueryError, args.json, orjson.dumps, print_finals)
    players: list[str] = []
    try:
        check_board(args.board)
        check_ties(args.ties)
        since: str | None = getattr(args, "since", None)  # top, player, around, page, ranks (5.6)
        try:
            check_since(since, args.board)
        except SinceNotRetained as exc:  # a final has no rank change: the user's mistake, known before Redis
            raise ValueError(str(exc)) from None
        if args.query in ("top", "page"):
            check_n(args.limit)
        if args.query == "top":
            top_ask(args.after, args.percentile)
        elif args.query == "around":
            check_r(args.radius)
        elif args.query == "score-for-percentile":
            hundredths(args.percentile)
        elif args.query == "ranks":
            players = check_players(players_named(args.players, args.players_file))
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    def ask(client: redis.Redis) -> dict[str, Any]:
        reader = BoardReader(client, args.namespace)
        if args.query == "top":
            return reader.top(args.game, args.board, args.limit, after=args.after, ties=args.ties,
                              percentile=args.percentile, since=since)
        if args.query == "player":
            return reader.player(args.game, args.board, args.player, ties=args.ties, since=since)
        if args.query == "page":
            return reader.page(args.game, args.board, args.player, args.limit, ties=args.ties, since=since)
        if args.query == "score-for-percentile":
            return reader.score_for_percentile(args.game, args.board, args.percentile, ties=args.ties)
        if args.query == "ranks":
            return reader.ranks(args.game, args.board, players, ties=args.ties, since=since)
        return reader.around(args.game, args.board, args.player, args.radius, ties=args.ties, since=since)

    return answer_query(args.redis, args.redis_read, ask, BoardQueryError, args.json, orjson.dumps, print_answer)


def players_named(players: str | None, path: str | None) -> list[str]:
    """The players ``--players`` or ``--players-file`` names (a usage error, ValueError, if the file
    cannot be read: a file of ids is the user's, so it is read before Redis is asked)."""
    if players is not None:
        return [player for player in players.split(",") if player]
    assert path is not None
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as file:
                text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --players-file {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    return [line.strip("\r") for line in text.split("\n") if line.strip("\r")]


def list_boards(client: redis.Redis, namespace: str, game: str | None) -> dict[str, Any]:
    """``boards list``'s answer: every board with its size, or ``game``'s (no such game: the games there are)."""
    answer = BoardReader(client, namespace).sizes()
    if game is None:
        return answer
    rows = [row for row in answer["boards"] if row["game_id"] == game]
    if not rows:
        games = sorted({row["game_id"] for row in answer["boards"]})
        raise NoSuchBoard(missing_board(game, "", {"games": dict.fromkeys(games)}))
    return {**answer, "boards": rows}


def print_list(answer: dict[str, Any]) -> None:
    # game ids are the user's: printed as they are, never read as rich markup
    rows = [{**row, "game_id": escape(row["game_id"]),
             "board": f"{row['board']} ({row['alias']})" if row["alias"] else row["board"]} for row in answer["boards"]]
    games = len({row["game_id"] for row in rows})
    footer = [f"{quantity(games)} games, {quantity(len(rows))} boards", f"snapshot {answer['snapshot_id']}"]
    print_rows("Boards by game", ("game_id", "board", "players"), rows, footer)


def print_finals(answer: dict[str, Any]) -> None:
    rows = [{**row, "game_id": escape(row["game_id"])} for row in answer["finals"]]
    print_rows("Final standings by game", ("game_id", "board", "players", "closed_by"), rows,
               [f"{quantity(len(rows))} finals", f"snapshot {answer['snapshot_id']}"])


def print_answer(answer: dict[str, Any]) -> None:
    board = f"{answer['game_id']} / {answer['board']}"
    snapshot = f"snapshot {answer['snapshot_id']}"
    if "since_snapshot_id" in answer:  # docs/semantics/boards.md 5.6
        basis = answer["since_snapshot_id"]
        snapshot += f", rank change since snapshot {basis}" if basis is not None else ", rank change since the start"
    if "items" not in answer and "player_id" not in answer:  # score-for-percentile
        score = "no entry" if answer["score"] is None else f"score {quantity(answer['score'])}"
        print_line(f"percentile {answer['percentile']} on {board}: {score} "
                   f"(of {quantity(answer['total_players'])} players)")
        print_line(snapshot)
        return
    if "items" not in answer:
        change = f", rank change {change_shown(answer)}" if "rank_change" in answer else ""
        print_line(f"{answer['player_id']} on {board}: score {quantity(answer['score'])}, rank "
                   f"{quantity(answer['rank'])} (competition rank {quantity(answer['competition_rank'])}), "
                   f"percentile {answer['percentile']}{change}")
        print_line(snapshot)
        return
    if "absent" in answer:
        absent = ", ".join(escape(player) for player in answer["absent"])
        title = f"{quantity(len(answer['items']))} of the players asked for on {board}"
        footer = [f"{quantity(answer['total_players'])} players on the board",
                  *([f"not on it: {absent}"] if absent else []), snapshot]
        rows = [{**item, "player_id": escape(item["player_id"])} for item in answer["items"]]
        shown: tuple[str, ...] = ("rank", "competition_rank", "rank_in_set", "player_id", "score")
        if any("rank_change" in item for item in rows):  # a --rank-change run's (docs/semantics/boards.md 5.5)
            shown += ("rank_change",)
            rows = [{**item, "rank_change": change_shown(item)} for item in rows]
        print_rows(title, shown, rows, footer)
        return
    if "page" in answer:
        title = f"Page {answer['page']} of {board} (with {escape(answer['player_id'])})"
        footer = [f"{quantity(answer['total_players'])} players on the board", snapshot]
    elif "total_players" in answer:
        title, footer = f"Top {len(answer['items'])} of {board}", [f"{quantity(answer['total_players'])} players "
                                                                   "on the board", snapshot]
    else:
        title, footer = f"Around the player on {board}", [snapshot]
    if "next" in answer:
        footer.append(f"next page: --after {answer['next']}")
    columns: tuple[str, ...] = ("rank", "competition_rank", "player_id", "score")
    rows = answer["items"]
    if any("rank_change" in item for item in rows):  # a --rank-change run's (docs/semantics/boards.md 5.5)
        columns += ("rank_change",)
        rows = [{**item, "rank_change": change_shown(item)} for item in rows]
    print_rows(title, columns, rows, footer)


def change_shown(item: dict[str, Any]) -> str:
    """An entry's ``rank_change`` in a table: signed (``+2`` gained, ``-1`` lost, ``0``), ``new``
    for an entry new since the board's previous change.

    >>> change_shown({"rank_change": 2}), change_shown({"rank_change": 0}), change_shown({})
    ('+2', '0', 'new')
    """
    change = item.get("rank_change")
    return "new" if change is None else f"{change:+d}" if change else "0"
