"""Every score board in this process's memory, following Redis: ``rankflow serve --board-index memory``.

Contract (the same answers as ``connectors.board_read``, so ``api.boards`` serves either):

* :class:`BoardMirror` loads every board of the current generation, then follows the
  ``board_changes`` stream the publish script writes (``scripts.PUBLISH_BOARDS``), asking
  Redis for the entries after the last one it applied whenever a publish is announced
  (``api.announce``), and at least every ``poll_ms`` (1 s).
  Queries (:meth:`top`, :meth:`player`, :meth:`around`, :meth:`ranks`, :meth:`boards`) are answered
  from memory, each wholly from one snapshot, named in its answer (its id, and its
  ``published_at``, which the load reads with the id and each ``board_changes`` entry
  carries, with ``age_ms`` at answer time): the last change set
  ``state.board_index.LiveBoards`` applied wholly (a query corrects what it reads by
  what the next one changed so far), and applying them gives the event loop back, after every ``slice_ops``
  operations, as long as they took (:func:`pause`), so a request never waits for more
  than one slice (about a millisecond).
* Loading never blocks Redis for long: each board is read in chunks
  (``scripts.BOARD_CHUNK``), anchored on the entries read last, so no unchanged entry is
  missed whatever the flow publishes meanwhile. The stream position is recorded
  before the load and the entries after it are replayed over it: they are absolute,
  so the load converges to the newest snapshot, and the mirror serves only once it
  has (:attr:`ready`).
* It loads everything again when it cannot follow: a new generation (``rankflow
  rebuild`` switched), an entry trimmed from the capped stream before it was read
  (the chain of ``previous`` snapshot ids breaks), a ``full`` entry (the publisher
  sent its whole state, e.g. Redis had lost its data), a ``large`` one (a snapshot
  too big to copy into the stream), or a reply it cannot read.
  Until then :class:`MirroredBoards` answers from Redis.
* When Redis cannot be reached it keeps serving the last snapshot it has
  (:attr:`problem` says why), as ``api.store.SnapshotCache`` does.
* When Redis has no usable boards snapshot (the generation has no snapshot id: nothing
  published yet, or Redis lost its data) every query raises
  ``connectors.board_read.NoBoardsSnapshot`` (HTTP ``503``), never "no such board", with
  the answer of the last snapshot it had, if any, to be served marked stale (the listeners'
  rule). It notices the loss at its next look, and the first snapshot published after it
  (a restarted run's, which holds every board: ``connectors.redis_boards``) makes it load
  everything again.

Memory: every entry once (a dict slot, a sorted-list slot, its packed key and player id);
docs/boards.md ("--board-index memory") gives the bytes per entry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, NoReturn

import orjson
import redis
import redis.asyncio as aioredis

from rankflow.api.change_feed import FeedGap, chain_end
from rankflow.api.watch import Polling
from rankflow.connectors.board_read import (
    AsyncBoardReader,
    NoBoardsSnapshot,
    NoSuchBoard,
    missing_board,
    NotOnBoard,
    check_board,
    check_n,
    check_r,
    check_players,
    games_answer,
    no_snapshot,
    scoped_ranks,
)
from rankflow.connectors.board_layout import LAYOUT, REACHED_BYTES, RedisBoardsLayout, layout_message
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.script_query import bind
from rankflow.connectors.scripts import BOARD_CHUNK
from rankflow.connectors.snapshot_age import published, stamp
from rankflow.state.board_index import (
    BoardId,
    Board,
    BoardIndex,
    BoardsCopy,
    ChangeSet,
    LiveBoards,
    Served,
    entry_fields,
    key_of_member,
    stream_ops,
)

log = logging.getLogger("rankflow.api")

SLICE_OPS = 128
"""Changes applied between two yields to the event loop: about 1 ms on a 1M-entry board (8 µs each)."""
MIN_PAUSE_S = 0.0002
"""The least time given back to the event loop after a slice (see :func:`pause`)."""
LOAD_CHUNK = 1_000
"""Entries per chunk of a board's load: about 1 ms of Redis and 4 ms of this process each."""
ANCHORS = 16
"""Entries of a chunk the next one may start after (the newest still on the board)."""
READ_MAX = 1_000
"""Stream entries read per poll at most (the stream keeps fewer)."""
LOAD_ATTEMPTS = 5
"""Starts of one board's load before giving up (every anchor left the board each time)."""


async def pause(started: float) -> float:
    """Give the event loop as long as the slice that began at ``started`` took; the next one's start.

    ``sleep(0)`` is not enough: it lets the loop run once, and a request needs several
    turns (read, route, answer, write), so it would wait one slice per turn. Pausing
    as long as the work took gives requests half the time while changes are applied
    (they need a few percent of a core at 2,000 results/s) and at most one slice of waiting.
    """
    await asyncio.sleep(max(MIN_PAUSE_S, time.perf_counter() - started))
    return time.perf_counter()


class CannotFollow(FeedGap):
    """The boards moved under the mirror (or changed too fast to load): load everything again."""


class BoardMirror(Polling):
    """The boards of one namespace (the boards flow's), in memory, at one snapshot at a time."""

    name = "board mirror"

    def __init__(self, client: aioredis.Redis, namespace: str, poll_ms: int = 1000,
                 slice_ops: int = SLICE_OPS, load_chunk: int = LOAD_CHUNK) -> None:
        super().__init__(poll_ms)
        self.client = client
        self.keys = Keys(boards_namespace(namespace))
        self.slice_ops, self.load_chunk = slice_ops, load_chunk
        self.ready = False  # what is served is exactly one snapshot of the current generation
        self.loads = 0  # whole loads (the rest are changes)
        self.problem: str | None = "not loaded yet"
        self._missing: str | None = None  # why Redis has no usable snapshot (then queries are 503s)
        self._buffer: LiveBoards | None = None
        self._generation = 0
        self._last_id = "0-0"  # the last stream entry read
        self._tail: int | None = None  # the snapshot id of the last change set read
        self._chunk = bind(client, BOARD_CHUNK)

    # -- following Redis (:class:`api.watch.Polling` calls these) ------------------------
    async def poll_once(self) -> None:
        if self.ready:
            await self.follow()
        else:
            await self.load()
        self.problem = self._missing

    def poll_failed(self, exc: Exception) -> bool:
        if isinstance(exc, (redis.RedisError, OSError)):
            self._lost(f"cannot reach Redis: {exc!r}")  # keep serving what we have
            if not self.ready:
                self._buffer = None
            return False
        if isinstance(exc, FeedGap):
            log.info("board mirror: %s; loading the boards again", exc)
            self._reset(str(exc))
            return True  # at once
        log.exception("board mirror: cannot follow the published boards")
        self._reset(f"cannot read the published boards: {exc!r}")
        return False

    def _reset(self, problem: str) -> None:
        """Forget everything (its memory too, before the next load): answers come from Redis meanwhile."""
        self.ready, self._buffer, self.problem, self._missing = False, None, problem, None

    def _lost(self, problem: str) -> None:
        if self.problem != problem:
            log.warning("board mirror: %s", problem)
        self.problem = problem

    async def load(self) -> None:
        """Load every board, then replay the changes published since the load began."""
        self._buffer = None
        generation = int(await self.client.get(self.keys.generation) or 0)
        k = self.keys.of_generation(generation)
        async with self.client.pipeline(transaction=True) as pipe:
            # one command per statement: redis-py types an async pipeline's commands as
            # awaitables, though each returns the pipeline
            pipe.get(self.keys.generation)
            pipe.get(k.snapshot_id)
            pipe.get(k.published_at)
            pipe.xrevrange(k.board_changes, count=1)
            pipe.smembers(k.boards)
            pipe.hgetall(k.aliases)
            pipe.get(k.boards_layout)
            now, sid, at, last, names, aliases, layout = await pipe.execute()
        if int(now or 0) != generation:
            raise CannotFollow("the generation switched during the load")
        if sid is None:  # nothing to load: no usable snapshot until one is published (follow notices it)
            self._generation, self._tail = generation, None
            self._last_id = last[0][0].decode() if last else "0-0"
            self._no_snapshot()
            self.ready = True
            return
        if layout != LAYOUT.encode():
            raise RedisBoardsLayout(layout_message((layout or b"1").decode()))
        boards: dict[BoardId, BoardIndex] = {}
        for name in sorted(names):
            game, board = orjson.loads(name)
            keys, ordered = await self._load_board(k, game, board)
            started = time.perf_counter()
            boards[(game, board)] = BoardIndex.of(keys, ordered)  # some 60 ms per 1M entries
            await pause(started)
        snapshot_id = int(sid)
        periods = {game.decode(): orjson.loads(p) for game, p in aliases.items()}
        self._generation, self._tail = generation, snapshot_id
        self._last_id = last[0][0].decode() if last else "0-0"
        # not served until the replay below caught up
        self._buffer = LiveBoards(BoardsCopy(snapshot_id, boards, periods, published(at)))
        self._missing = None
        self.loads += 1
        await self.follow()
        self.ready = True
        self._notify()

    async def _load_board(self, k: Keys, game: str, board: str) -> tuple[dict[str, bytes], list[bytes]]:
        """A board's key per player, and its keys in board order."""
        zset = k.board(game, board)[0]
        for _ in range(LOAD_ATTEMPTS):
            keys: dict[str, bytes] = {}
            anchors: list[bytes] = []  # the last ANCHORS (member, score) pairs read
            while (flat := await self._chunk(*BOARD_CHUNK.ordered({"board": zset}, {"size": self.load_chunk},
                                                                  more_argv=anchors))) is not None:
                started = time.perf_counter()
                members = flat[::2]
                for member, score in zip(members, flat[1::2]):
                    keys[member[REACHED_BYTES:].decode()] = key_of_member(member, float(score), REACHED_BYTES)
                if len(members) < self.load_chunk:
                    # Nearly sorted already (a changed player may sit where they were first read): timsort's case.
                    ordered = sorted(keys.values())
                    await pause(started)
                    return keys, ordered
                anchors = flat[-2 * ANCHORS:]  # member, score pairs: an anchor is a place
                await pause(started)
        raise CannotFollow(f"board {game}/{board} changed too fast to load")

    async def follow(self) -> None:
        """Read the stream entries after the last one read and apply them (in slices)."""
        k = self.keys.of_generation(self._generation)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.get(self.keys.generation)  # one command per statement, as in load
            pipe.get(k.snapshot_id)
            pipe.xrange(k.board_changes, min=f"({self._last_id}", max="+", count=READ_MAX)
            generation, sid, entries = await pipe.execute()
        if int(generation or 0) != self._generation:
            raise CannotFollow(f"the boards moved to generation {int(generation or 0)}")
        if sid is None:  # Redis lost its data (or nothing was ever published): keep the copy, for stale answers
            self._no_snapshot()
            return
        if self._missing is not None:
            raise CannotFollow("a snapshot was published after Redis had none")
        if self._tail is not None and int(sid) < self._tail:  # a new run's ids after a loss the mirror missed
            raise CannotFollow(f"the boards' snapshot id went back from {self._tail} to {int(sid)}")
        buffer = self._buffer
        assert buffer is not None  # a load with a snapshot made it, and none without one gets here
        # full: sent every board again; large: too many changes to copy; a gap: trimmed before read
        chain_end(str(self._tail).encode(), (fields for _, fields in entries))
        started = time.perf_counter()
        for entry_id, fields in entries:
            change = ChangeSet(int(fields[b"snapshot_id"]), published_at=published(fields.get(b"published_at")))
            for part in stream_ops(fields[b"aliases"], fields[b"boards"], fields[b"dropped"], self.slice_ops):
                change.ops += part
                started = await pause(started)  # 2,000 entries' keys take some 3 ms to build: in slices too
            buffer.add(change)
            self._tail, self._last_id = change.snapshot_id, entry_id.decode()
        while buffer.pending:
            if buffer.step(self.slice_ops) and self.ready:
                self._notify()
            started = await pause(started)

    def _notify(self) -> None:
        self._announce_change()

    def _no_snapshot(self) -> None:
        """Redis has no usable snapshot: queries raise :class:`NoBoardsSnapshot` from now on."""
        if self._missing is None:
            self._missing = no_snapshot(self.keys.namespace)
            log.warning("board mirror: %s", self._missing)
            self._notify()  # nothing served is current: the streams and the shared tops look again
        self.problem = self._missing

    # -- what the streams and the top cache watch (as ``api.board_watch.BoardWatch``) -------
    @property
    def version(self) -> tuple[int, bytes | None, int] | None:
        """The generation, the snapshot id served and the loads so far (after Redis lost its data a
        new run's ids start over: a load is a new version whatever its id); None while not ready
        (answers come from Redis) or while Redis has no usable snapshot."""
        if not self.ready or self._buffer is None or self._missing is not None:
            return None
        sid = self._buffer.serving.snapshot_id
        return self._generation, None if sid is None else str(sid).encode(), self.loads


    @property
    def published_at(self) -> int | None:
        """The publish time of :attr:`version`'s snapshot (None with it)."""
        if self.version is None:
            return None
        assert self._buffer is not None
        return self._buffer.serving.published_at

    # -- queries (only while ready) ---------------------------------------------------
    def _board(self, game: str, board: str) -> tuple[Served, str, Board]:
        check_board(board)
        assert self._buffer is not None
        copy = self._buffer.serving
        name = copy.resolve(game, board)
        index = copy.board((game, name))
        if not index:
            raise NoSuchBoard(missing_board(game, board, self._boards()))
        return copy, name, index

    def _unpublished(self, board: str, query: Callable[[], dict[str, Any]]) -> NoReturn:
        """No usable snapshot in Redis: :class:`NoBoardsSnapshot`, with ``query``'s answer from the
        last copy, if there is one and it answers (a usage error stays one)."""
        assert self._missing is not None
        check_board(board)
        last = None
        if self._buffer is not None:
            try:
                last = query()
            except (NoSuchBoard, NotOnBoard):
                pass
        raise NoBoardsSnapshot(self._missing, last)

    def top(self, game: str, board: str, n: int = 10) -> dict[str, Any]:
        check_n(n)
        if self._missing is not None:
            self._unpublished(board, lambda: self._top(game, board, n))
        return self._top(game, board, n)

    def _top(self, game: str, board: str, n: int) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        return {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name,
                "total_players": len(index),
                "items": index.items(0, n)}

    def player(self, game: str, board: str, player: str) -> dict[str, Any]:
        if self._missing is not None:
            self._unpublished(board, lambda: self._player(game, board, player))
        return self._player(game, board, player)

    def _player(self, game: str, board: str, player: str) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        key = index.key(player)
        if key is None:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        score = entry_fields(key)[1]
        return {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name, "player_id": player,
                "score": score, "rank": index.below(key) + 1, "competition_rank": index.better_than(score) + 1}

    def around(self, game: str, board: str, player: str, r: int = 5) -> dict[str, Any]:
        check_r(r)
        if self._missing is not None:
            self._unpublished(board, lambda: self._around(game, board, player, r))
        return self._around(game, board, player, r)

    def _around(self, game: str, board: str, player: str, r: int) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        rank0 = index.rank0(player)
        if rank0 is None:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        return {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name,
                "items": index.items(max(0, rank0 - r), rank0 + r + 1)}

    def ranks(self, game: str, board: str, players: list[str]) -> dict[str, Any]:
        players = check_players(players)
        if self._missing is not None:
            self._unpublished(board, lambda: self._ranks(game, board, players))
        return self._ranks(game, board, players)

    def _ranks(self, game: str, board: str, players: list[str]) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        rows, absent = [], []
        for player in players:
            key = index.key(player)
            if key is None:
                absent.append(player)
                continue
            score = entry_fields(key)[1]
            rows.append((player, score, index.below(key) + 1, index.better_than(score) + 1))
        return scoped_ranks(stamp(copy.snapshot_id, copy.published_at), game, name, len(index), rows, absent)

    def boards(self) -> dict[str, Any]:
        if self._missing is not None:
            raise NoBoardsSnapshot(self._missing, None if self._buffer is None else self._boards())
        return self._boards()

    def _boards(self) -> dict[str, Any]:
        assert self._buffer is not None
        copy = self._buffer.serving
        return games_answer(copy.snapshot_id, copy.boards, copy.aliases)

    def entries(self) -> int:
        """Board entries served; 0 until the mirror serves."""
        return self._buffer.serving.entries() if self.ready and self._buffer is not None else 0


class MirroredBoards:
    """The board queries of ``api.boards``: from the mirror once it is ready, from Redis until then."""

    def __init__(self, mirror: BoardMirror, reader: AsyncBoardReader) -> None:
        self.mirror, self.reader = mirror, reader

    async def top(self, game: str, board: str, n: int = 10) -> dict[str, Any]:
        return self.mirror.top(game, board, n) if self.mirror.ready else await self.reader.top(game, board, n)

    async def player(self, game: str, board: str, player: str) -> dict[str, Any]:
        if self.mirror.ready:
            return self.mirror.player(game, board, player)
        return await self.reader.player(game, board, player)

    async def around(self, game: str, board: str, player: str, r: int = 5) -> dict[str, Any]:
        if self.mirror.ready:
            return self.mirror.around(game, board, player, r)
        return await self.reader.around(game, board, player, r)

    async def ranks(self, game: str, board: str, players: list[str]) -> dict[str, Any]:
        if self.mirror.ready:
            return self.mirror.ranks(game, board, players)
        return await self.reader.ranks(game, board, players)

    async def boards(self) -> dict[str, Any]:
        return self.mirror.boards() if self.mirror.ready else await self.reader.boards()
