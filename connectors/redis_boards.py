"""The boards flow's state in Redis: each board a sorted set, written with the snapshot.

:class:`BoardsState` is the boards flow's :class:`connectors.redis_publish.ProductState`:
it turns a :class:`state.board_snapshot.BoardsSnapshot` into the arguments of
``scripts.PUBLISH_BOARDS`` (the layout is in ``redis_keys``; why a board's order is
Redis's own order, in ``scripts``). Entries not yet in Redis wait for the next
snapshot Redis stores, latest value per player and board. What happens when Redis lost
its data: :class:`BoardsState`.
"""

from __future__ import annotations

from typing import Any, cast
from zlib import crc32

import orjson
import redis

from rankflow.connectors.board_layout import LAYOUT, keyed
from rankflow.connectors.redis_generations import Fence
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_replies import Members
from rankflow.connectors.redis_publish import merge_pending
from rankflow.connectors.scripts import PUBLISH_BOARDS
from rankflow.state.board_rules import FINAL
from rankflow.state.board_snapshot import BoardsSnapshot

BOARD_CHANGES_MAXLEN = 100
"""Entries kept in the ``board_changes`` stream: 25 s of snapshots at the default
250 ms barrier (about 70 KB each at 2,000 results/s: some 7 MB of Redis). A mirror
further behind reloads the boards (``api.board_mirror``)."""

BOARD_CHANGES_MAX_BYTES = 1 << 20
"""A snapshot whose entries JSON is longer (some 30,000 entries: a backlog, not steady
traffic) is streamed as ``large``, without them: mirrors reload instead. Bounds the
stream at about 100 MB whatever the flow publishes."""

BoardEntries = dict[str, tuple[int, int]]  # player -> (score, reached_at)


def board_name(game: str, board: str) -> bytes:
    return orjson.dumps([game, board])


class RedisLostBoards(RuntimeError):
    """Redis has no snapshot of the run's generation, or an older one than the run's changes build
    on, and this process cannot send every board."""


class BoardsState:
    """Board entries, aliases and dropped boards of the snapshots Redis has not stored yet.

    ``complete``: what this execution publishes starts from nothing, so until Redis
    stores its first snapshot the pending entries are every board (a fresh run, or a
    resumed run whose per-player stage republishes every record because Redis had
    none, or less than the run's recovery state, at start-up: ``Boards.must_republish``).
    Redis answering ``NO_TABLE`` or ``GAP`` then gets them as the whole state. Any other
    ``NO_TABLE`` or ``GAP`` (Redis lost its data, or was restored from an older backup,
    during the run) stops the run with :class:`RedisLostBoards`: holding a copy of 10M players' entries here
    to heal in place would double the flow's memory, and a restart heals exactly.
    """

    script = PUBLISH_BOARDS

    def __init__(self, complete: bool = True, rank_change: bool = False) -> None:
        self._rank_change = rank_change  # keep each changed board's moves (``--rank-change``, scripts.PUBLISH_BOARDS)
        self._pending: dict[tuple[str, str], BoardEntries] = {}
        self._aliases: dict[str, tuple[str | None, str | None]] = {}
        self._dropped: set[tuple[str, str]] = set()
        self._closed: dict[tuple[str, str], bytes] = {}  # periods that became finals: what the finals hash holds
        self._expired: set[tuple[str, str]] = set()  # finals to delete (their period's names)
        self._full = False
        self._whole = complete  # the pending entries are every board (nothing stored yet)

    def remember(self, snapshot: BoardsSnapshot) -> None:
        pending = self._pending
        merge_pending(pending, snapshot.entries)
        for bid in snapshot.dropped:
            pending.pop(bid, None)
            self._dropped.add(bid)
        if snapshot.closed or snapshot.expired:  # docs/semantics/boards.md 9: the closed boards' entries stay pending
            for bid in snapshot.closed:
                self._closed[bid] = orjson.dumps({"closed_by": snapshot.snapshot_id, "positions": snapshot.positions})
            self._expired.update(snapshot.expired)
        self._aliases.update(snapshot.aliases)

    def resend_all(self, why: str) -> None:
        if not self._whole:
            raise RedisLostBoards(
                f"{why}: stopping. Start the run again with the same --recovery-dir: it sends every board again "
                "when Redis has none or holds less than its recovery state (or rebuild with `rankflow rebuild "
                "--flow boards`)")
        self._full = True

    def stored(self) -> None:
        self._pending, self._aliases, self._dropped, self._full, self._whole = {}, {}, set(), False, False
        self._closed, self._expired = {}, set()

    def prepare(self, client: redis.Redis, k: Keys, fence: Fence, hurry: bool = False) -> None:
        """Before a ``full`` call: the boards Redis lists that the whole state does not hold are
        dropped with it. Redis behind the run (an older backup) may list periods retention
        dropped since; the run will never name them again. A script must declare every key it
        touches, so they are read here; only the generation's owner writes them."""
        if not self._full:
            return
        for raw in cast(Members, client.smembers(k.boards)):
            game, board = orjson.loads(raw)
            if (game, board) not in self._pending:
                self._dropped.add((game, board))

    def keys(self, k: Keys) -> list[str]:
        out = PUBLISH_BOARDS.product_keys(aliases=k.aliases, boards=k.boards, board_changes=k.board_changes,
                                          boards_layout=k.boards_layout)
        for game, board in self._pending:
            out.extend(k.board(game, board))
        for game, board in self._dropped:
            out.extend(k.board(game, board))
        for game, board in self._closed:
            out.extend((*k.board(game, board), *k.board(game, FINAL + board)))
        for game, board in self._expired:
            out.extend(k.board(game, FINAL + board))
        out.append(k.finals)
        out.append(k.rank_change)
        return out

    def args(self) -> list[Any]:
        args = PUBLISH_BOARDS.at_p(full="full" if self._full else "delta", layout=LAYOUT, changes_cap=BOARD_CHANGES_MAXLEN,
                                   entry_bytes=BOARD_CHANGES_MAX_BYTES, changed=len(self._pending),
                                   dropped=len(self._dropped), rank_change="1" if self._rank_change else "",
                                   closed=len(self._closed), expired=len(self._expired), aliases=len(self._aliases))
        for game, periods in self._aliases.items():
            args += (game, orjson.dumps(list(periods)))
        hashes: dict[str, int] = {}  # each player's once, whatever the boards they changed on
        for (_, board), entries in self._pending.items():  # O(entries); a set difference per board would walk every hash so far
            if keyed(board) is None:  # all and the seasons: members of reached_at and the id, in buckets (board_layout)
                for player in entries:
                    if player not in hashes:
                        hashes[player] = crc32(player.encode())
        dumps = orjson.dumps
        args.append(dumps(hashes))
        for (game, board), entries in self._pending.items():
            codec = keyed(board)
            scores = b"" if codec is None else codec.scores_json(entries)
            args += (board_name(game, board), dumps(entries), len(entries), scores)
        args.extend(board_name(game, board) for game, board in self._dropped)
        for (game, board), meta in self._closed.items():
            args += (board_name(game, board), board_name(game, FINAL + board), meta)
        args.extend(board_name(game, FINAL + board) for game, board in self._expired)
        return args
