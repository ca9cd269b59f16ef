"""Reading the list of final standings (docs/semantics/boards.md 9): ``rankflow boards finals``,
``GET /boards/{game}/finals``.

A final is read like a board (``board_read``: its name is ``final:`` and its period's board);
this lists them, from the finals hash the publish script writes in the same atomic step as the
snapshot (``lua/finals.lua``), so the list and the snapshot id come from one state.
"""

from __future__ import annotations

from typing import Any

import orjson
import redis
import redis.asyncio as aioredis

from rankflow.connectors.board_groups import game_of
from rankflow.connectors.board_read import NoBoardsSnapshot, no_snapshot
from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys, boards_namespace


def finals_answer(sid: bytes | None, namespace: str, held: dict[bytes, bytes], game: str | None) -> dict[str, Any]:
    """``{snapshot_id, finals: [{game_id, board, closed_by, players}]}``, by game then newest first; a
    group's final is its game's, named ``final:BOARD@FIELD=VALUE`` (read like a board by that name)."""
    if sid is None:
        raise NoBoardsSnapshot(no_snapshot(namespace))
    rows = []
    for name, meta in held.items():
        game_id, board = orjson.loads(name)
        if "@" in game_id:  # a group's final under its game (docs/semantics/boards.md 10)
            game_id, suffix = game_of(game_id)
            board += suffix
        if game is None or game_id == game:
            info = orjson.loads(meta)
            rows.append({"game_id": game_id, "board": board, "closed_by": info["closed_by"],
                         "players": info["players"]})
    rows.sort(key=lambda row: (row["game_id"], -row["closed_by"], row["board"]))
    return {"snapshot_id": int(sid), "finals": rows}


def _keys(client_generation: int, namespace: str) -> Keys:
    return Keys(boards_namespace(namespace)).of_generation(client_generation)


def read_finals(client: redis.Redis, namespace: str, game: str | None = None) -> dict[str, Any]:
    """The finals of the current generation (of ``game``, or every game's), from one snapshot."""
    keys = _keys(current_generation(client, boards_namespace(namespace)), namespace)
    pipe = client.pipeline(transaction=True)
    pipe.get(keys.snapshot_id)
    pipe.hgetall(keys.finals)
    sid, held = pipe.execute()
    return finals_answer(sid, keys.namespace, held, game)


async def aread_finals(client: aioredis.Redis, namespace: str, game: str | None = None) -> dict[str, Any]:
    """:func:`read_finals` on an async client."""
    generation = int(await client.get(Keys(boards_namespace(namespace)).generation) or 0)
    keys = _keys(generation, namespace)
    async with client.pipeline(transaction=True) as pipe:
        pipe.get(keys.snapshot_id)
        pipe.hgetall(keys.finals)
        sid, held = await pipe.execute()
    return finals_answer(sid, keys.namespace, held, game)
