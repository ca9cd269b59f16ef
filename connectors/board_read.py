"""Reading a board: top, one player, around a player, each from one snapshot.

Every query is one Lua script (``redis_scripts.BOARD_READ_LUA``), so the snapshot id, the
player count and every item of an answer come from the same state: the publish
script changes a board and the snapshot id in one atomic step. Ranks are exact for
every player: ``ZRANK`` of the player's member is the rank - 1 (BOARDS.md 4, see
``PUBLISH_BOARDS_LUA``), and ``ZCOUNT`` of the strictly better scores gives the
competition rank. The aliases ``daily`` and ``weekly`` are resolved first and
checked again inside the script (a snapshot may move them in between: then the
query runs again), as is the generation a rebuild may switch.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import redis

from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_scripts import BOARD_READ_LUA, MOVES

MAX_N = 1000
MAX_R = 50
REACHED_DIGITS = 15

BOARD_PATTERN = re.compile(r"(all|best|daily|weekly|daily:\d{4}-\d{2}-\d{2}|weekly:\d{4}-W\d{2})")

class BoardQueryError(LookupError):
    """A query that has no answer: the board does not exist, or the player is not on it."""


class NoSuchBoard(BoardQueryError):
    pass


class NotOnBoard(BoardQueryError):
    pass


def check_board(board: str) -> None:
    """A usage error (ValueError) unless ``board`` is a board name or an alias."""
    if not BOARD_PATTERN.fullmatch(board):
        raise ValueError(f"unknown board {board!r}: all, best, daily, weekly, daily:YYYY-MM-DD or weekly:YYYY-Www")


def check_n(n: int) -> None:
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n must be between 1 and {MAX_N}, got {n}")


def check_r(r: int) -> None:
    if not 0 <= r <= MAX_R:
        raise ValueError(f"r must be between 0 and {MAX_R}, got {r}")


class BoardReader:
    """Board queries of one namespace (the boards flow's, :func:`boards_namespace`)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.keys = Keys(boards_namespace(namespace))
        self.script = client.register_script(BOARD_READ_LUA)

    def top(self, game: str, board: str, n: int = 10) -> dict[str, Any]:
        check_n(n)
        sid, card, flat, name = self._query(game, board, "top", n)
        return {"snapshot_id": sid, "game_id": game, "board": name, "total_players": card,
                "items": _items(flat, 1, 1)}

    def player(self, game: str, board: str, player: str) -> dict[str, Any]:
        sid, card, answer, name = self._query(game, board, "player", 0, player)
        if not answer:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        score, rank, better = answer
        return {"snapshot_id": sid, "game_id": game, "board": name, "player_id": player,
                "score": -int(float(score)), "rank": int(rank) + 1, "competition_rank": int(better) + 1}

    def around(self, game: str, board: str, player: str, r: int = 5) -> dict[str, Any]:
        check_r(r)
        sid, card, answer, name = self._query(game, board, "around", r, player)
        if not answer:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        start, better, flat = answer
        return {"snapshot_id": sid, "game_id": game, "board": name, "items": _items(flat, int(start) + 1, better + 1)}

    def _query(self, game: str, board: str, query: str, arg: int, player: str = "") -> tuple[int | None, int, Any, str]:
        check_board(board)
        alias = board if board in ("daily", "weekly") else ""
        generation = current_generation(self.client, self.keys.namespace)
        for _ in range(MOVES + 2):
            keys = self.keys.of_generation(generation)
            name = self._resolve(keys, game, alias) if alias else board
            if name is None:
                raise NoSuchBoard(f"no such board: {game}/{board}")
            zset, hashed = keys.board(game, name)
            reply = self.script(keys=[keys.generation, keys.snapshot_id, keys.aliases, zset, hashed],
                                args=[generation, alias, name if alias else "", query, arg, player, game])
            tag = reply[0]
            if tag == b"moved":
                generation = int(reply[1])
                continue
            if tag == b"alias":
                continue
            sid, card = reply[1], int(reply[2])
            if card == 0:
                raise NoSuchBoard(f"no such board: {game}/{name}")
            return (int(sid) if sid else None), card, (reply[3] if len(reply) > 3 else None), name
        raise RuntimeError("the boards kept changing generation or aliases while being read; try again")

    def _resolve(self, keys: Keys, game: str, alias: str) -> str | None:
        periods = self.client.hget(keys.aliases, game)
        if periods is None:
            return None
        daily, weekly = orjson.loads(periods)
        period = daily if alias == "daily" else weekly
        return None if period is None else f"{alias}:{period}"


def _items(flat: list[bytes], first_rank: int, first_competition: int) -> list[dict[str, Any]]:
    """``member, score`` pairs from ``ZRANGE ... WITHSCORES`` as answer items with both ranks."""
    items: list[dict[str, Any]] = []
    competition, previous = first_competition, None
    for i in range(0, len(flat), 2):
        m = flat[i].decode()
        score = -int(float(flat[i + 1]))
        rank = first_rank + i // 2
        if previous is not None and score != previous:
            competition = rank
        previous = score
        items.append({"rank": rank, "competition_rank": competition, "player_id": m[REACHED_DIGITS:],
                      "score": score})
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
        flat = client.zrange(keys.board(game, board)[0], 0, -1, withscores=True)
        out.setdefault(game, {})[board] = [
            (m.decode()[REACHED_DIGITS:], -int(score), int(m[:REACHED_DIGITS])) for m, score in flat]
    return out


def read_aliases(client: redis.Redis, namespace: str) -> dict[str, dict[str, str | None]]:
    """Each game's ``daily`` and ``weekly`` period in the current generation."""
    keys = Keys(boards_namespace(namespace))
    keys = keys.of_generation(current_generation(client, keys.namespace))
    return {game.decode(): dict(zip(("daily", "weekly"), orjson.loads(periods)))
            for game, periods in client.hgetall(keys.aliases).items()}
