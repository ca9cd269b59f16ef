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

from rankflow._native import BoardKeys
from rankflow.api.change_feed import FeedGap, chain_end
from rankflow.api.http_cache import tag_parts
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
from rankflow.connectors.board_pages import (Cursor, TopAsk, check_ties, hundredths, page_answer, percentile,
                                             restyle, styled_rank, top_ask, within_percent)
from rankflow.connectors.board_layout import LAYOUT, REACHED_BYTES, RedisBoardsLayout, entries_of, keyed, layout_message
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.script_query import bind
from rankflow.connectors.scripts import BOARD_CHUNK
from rankflow.connectors.snapshot_age import published, stamp
from rankflow.state.board_rules import FINAL
from rankflow.state.board_index import (
    BoardId,
    Board,
    BoardIndex,
    BoardsCopy,
    ChangeSet,
    LiveBoards,
    Served,
    entry_fields,
    entry_key,
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
MAX_PARTS = 1_000
"""Boards whose answer parts :meth:`BoardMirror.player_bytes` keeps; past this they start over."""
# player_bytes' parts of a board: (the change set in flight when made, board name, the answer's
# first bytes, its bytes after age and stale, published_at, the board's kernel, snapshot id)
_Hot = tuple[object, str, bytes, bytes, int, BoardKeys, int]
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
        self.rank_change = False  # the generation keeps its boards' moves: :attr:`serves` is False
        self.loads = 0  # whole loads (the rest are changes)
        self.problem: str | None = "not loaded yet"
        self._missing: str | None = None  # why Redis has no usable snapshot (then queries are 503s)
        self._buffer: LiveBoards | None = None
        self._generation = 0
        self._last_id = "0-0"  # the last stream entry read
        self._tail: int | None = None  # the snapshot id of the last change set read
        self._chunk = bind(client, BOARD_CHUNK)
        self._version_made: tuple[Any, Any] = (None, None)  # :attr:`version`, per what it is made of
        # player_bytes' per board and snapshot: the answer's parts, and the entries ahead of each score
        self._parts: dict[tuple[str, str], tuple[tuple[int, int, int], bytes, bytes]] = {}
        self._hot: dict[tuple[str, str], _Hot] = {}  # the same per board as asked (an alias too), while settled

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
            pipe.exists(k.rank_change)
            now, sid, at, last, names, aliases, layout, moves = await pipe.execute()
        self.rank_change = bool(moves)
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
            keys = await self._load_board(k, game, board)
            started = time.perf_counter()
            boards[(game, board)] = BoardIndex.of(keys.values())
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

    async def _load_board(self, k: Keys, game: str, board: str) -> dict[str, bytes]:
        """A board's key per player (a player a later chunk met again: its last key)."""
        zset = k.board(game, board)[0]
        entry = None if keyed(board) is None else entries_of(board)  # None: members of reached_at and the id
        for _ in range(LOAD_ATTEMPTS):
            keys: dict[str, bytes] = {}
            anchors: list[bytes] = []  # the last ANCHORS (member, score) pairs read
            while (flat := await self._chunk(*BOARD_CHUNK.ordered({"board": zset}, {"size": self.load_chunk},
                                                                  more_argv=anchors))) is not None:
                started = time.perf_counter()
                members = flat[::2]
                if entry is None:
                    for member, score in zip(members, flat[1::2]):
                        keys[member[REACHED_BYTES:].decode()] = key_of_member(member, float(score), REACHED_BYTES)
                else:
                    for member, score in zip(members, flat[1::2]):
                        player, points, reached_at = entry(member, score)
                        keys[player] = entry_key(player, points, reached_at)
                if len(members) < self.load_chunk:
                    await pause(started)
                    return keys
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
            pipe.exists(k.rank_change)
            generation, sid, entries, moves = await pipe.execute()
        self.rank_change = bool(moves)
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
        sid = self._buffer.live.snapshot_id  # the served one's (``Served.snapshot_id``)
        made = self._version_made
        if made[0] != (self._generation, sid, self.loads):  # made once per snapshot: asked per prepared top
            made = self._version_made = ((self._generation, sid, self.loads),
                                         (self._generation, None if sid is None else str(sid).encode(), self.loads))
        return made[1]


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

    def top(self, game: str, board: str, n: int = 10, *, after: str | None = None, ties: str | None = None,
            percentile: str | None = None) -> dict[str, Any]:
        check_n(n)
        check_ties(ties)
        ask = top_ask(after, percentile)
        if self._missing is not None:
            self._unpublished(board, lambda: self._top(game, board, n, ties, ask))
        return self._top(game, board, n, ties, ask)

    @property
    def serves(self) -> bool:
        """Whether the board queries are answered here: once loaded, and while the generation keeps no
        moves. With them (``run --flow boards --rank-change``) every answer carries ``rank_change``
        (docs/semantics/boards.md 5.5), which Redis's reader computes beside the board: the queries go
        there (:class:`MirroredBoards`), as before the load."""
        return self.ready and not self.rank_change

    def top_at_hand(self, game: str, board: str, n: int) -> dict[str, Any] | None:
        """:meth:`top` of the snapshot :attr:`version` names, without waiting (``api.shared_cache``'s
        ``at_hand``); None while the mirror does not serve or Redis has no usable snapshot."""
        if not self.serves or self._missing is not None or self._buffer is None:
            return None
        return self._top(game, board, n)

    def _top(self, game: str, board: str, n: int, ties: str | None = None,
             ask: TopAsk = TopAsk("top")) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        if ask.kind == "top" and ask.share is None and ties is None:
            return {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name,
                    "total_players": len(index),
                    "items": index.items(0, n)}
        head = {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name}
        start = 0
        if ask.kind == "after":
            assert ask.cursor is not None
            c = ask.cursor
            start = index.below(entry_key(c.player_id, c.score, c.reached_at) + b"\0")  # just after its place
        items = _styled(index, index.items(start, start + ask.reads(n)), ties)
        if ask.kind == "top":
            if ask.share is not None:
                items = within_percent(items, len(index), ask.share)
            return {**head, "total_players": len(index), "items": items}
        return page_answer(head, len(index), start, items, n, ask.share, _cursors(index, items))

    def player(self, game: str, board: str, player: str, *, ties: str | None = None) -> dict[str, Any]:
        check_ties(ties)
        if self._missing is not None:
            self._unpublished(board, lambda: self._player(game, board, player, ties))
        return self._player(game, board, player, ties)

    def _player(self, game: str, board: str, player: str, ties: str | None = None) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        key = index.key(player)
        if key is None:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        score = entry_fields(key)[1]
        answer = {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name, "player_id": player,
                  "score": score, "rank": index.below(key) + 1, "competition_rank": index.better_than(score) + 1}
        if ties is not None:
            answer["rank"] = styled_rank(ties, answer["rank"], answer["competition_rank"],
                                         distinct_above(index, score) if ties == "dense" else 0)
        answer["percentile"] = percentile(answer["rank"], len(index))
        return answer

    def player_bytes(self, game: str, board: str, player: str, stale_after_ms: int) -> bytes | None:
        """:meth:`player`'s answer judged by ``stale_after_ms`` (``connectors.snapshot_age.judged``), as
        the JSON ``connectors.redis_publish.dumps_document`` makes of it, byte for byte; None while
        Redis has no usable snapshot or the snapshot has no publish time (the dict path answers).

        Why: a player's rank is a new answer almost every request (one player of many), so it cannot
        be encoded once per snapshot like a top; building the answer's dict, judging it in another
        and encoding it cost a prepared rank more than its two order queries (docs/benchmarks.md,
        "Capacity of one serve process"). One format of the numbers into the parts that stay the
        same per board (kept per board and snapshot) is the same bytes. A player's competition rank
        is the entries with a better score. The board's kernel makes the whole answer in one call
        (``BoardKeys.player_answer``), as the board is served: while a change set is half applied,
        as it was before it (the kernel records what the change set did so far)."""
        hot = self._hot_board(game, board)
        if hot is None:
            return None
        _, name, head, middle, at, native, _ = hot
        made = native.player_answer(player, head, middle, orjson.dumps(player), at, stale_after_ms)
        if made is None:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        return made

    def player_reply(self, game: str, board: str, player: str, stale_after_ms: int, target: bytes,
                     control: bytes) -> tuple[bytes, bytes] | None:
        """:meth:`player_bytes` and the answer's cache validators for request ``target`` (``api.prepared.
        Validated``: the lines ``api.http_cache.HttpCache.of_body`` makes of the body, ``control`` its
        ``cache-control``), the board as served, in one call of the kernel (``BoardKeys.player_reply``);
        None as :meth:`player_bytes`."""
        hot = self._hot_board(game, board)
        if hot is None:
            return None
        _, name, head, middle, at, native, sid = hot
        made = native.player_reply(player, head, middle, at, stale_after_ms, target, *tag_parts(sid, at, control))
        if made is None:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        return made

    def _hot_board(self, game: str, board: str) -> _Hot | None:
        """:meth:`_heat`'s parts of a board, kept while the same change set is the next one (its
        kernel answers the board as served meanwhile); None: the dict path answers."""
        if self._missing is not None:
            return None
        hot = self._hot.get((game, board))
        buffer = self._buffer
        if hot is None or buffer is None or hot[0] is not buffer.flight:
            hot = self._heat(game, board)
        return hot

    def _heat(self, game: str, board: str) -> _Hot | None:
        """:meth:`player_bytes`' parts of one board for the snapshot served (its name, the answer's
        fixed bytes, its kernel), kept while the change set in flight is the same one (a new
        snapshot, or a new load, makes them again); None when the snapshot has no publish time
        (the dict path answers)."""
        copy, name, index = self._board(game, board)
        at, sid = copy.published_at, copy.snapshot_id
        if at is None or sid is None:
            return None
        served = (self._generation, self.loads, sid)  # ids start over after Redis lost its data: a load is new
        parts = self._parts.get((game, name))
        if parts is None or parts[0] != served:
            if len(self._parts) >= MAX_PARTS:
                self._parts = {}
            parts = self._parts[(game, name)] = (
                served, b'{"snapshot_id":%d,"published_at":%d,"age_ms":' % (sid, at),
                b',"game_id":%s,"board":%s,"player_id":' % (orjson.dumps(game), orjson.dumps(name)))
        assert self._buffer is not None
        # a view is its live board's kernel, which answers as before the change set in flight
        native = index.entries if isinstance(index, BoardIndex) else index.live.entries
        hot: _Hot = (self._buffer.flight, name, parts[1], parts[2], at, native, sid)
        if len(self._hot) >= MAX_PARTS:
            self._hot = {}
        self._hot[(game, board)] = hot
        return hot

    def around(self, game: str, board: str, player: str, r: int = 5, *, ties: str | None = None) -> dict[str, Any]:
        check_r(r)
        check_ties(ties)
        if self._missing is not None:
            self._unpublished(board, lambda: self._around(game, board, player, r, ties))
        return self._around(game, board, player, r, ties)

    def _around(self, game: str, board: str, player: str, r: int, ties: str | None = None) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        rank0 = index.rank0(player)
        if rank0 is None:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        return {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name,
                "items": _styled(index, index.items(max(0, rank0 - r), rank0 + r + 1), ties)}

    def page(self, game: str, board: str, player: str, n: int = 10, *, ties: str | None = None) -> dict[str, Any]:
        """The page of ``n`` a player is on (docs/semantics/boards.md 5.1)."""
        check_n(n)
        check_ties(ties)
        if self._missing is not None:
            self._unpublished(board, lambda: self._page(game, board, player, n, ties))
        return self._page(game, board, player, n, ties)

    def _page(self, game: str, board: str, player: str, n: int, ties: str | None) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        rank0 = index.rank0(player)
        if rank0 is None:
            raise NotOnBoard(f"{player} is not on {game}/{name}")
        start = rank0 - rank0 % n
        items = _styled(index, index.items(start, start + n), ties)
        head = {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name, "player_id": player,
                "page": start // n + 1}
        return page_answer(head, len(index), start, items, n, None, _cursors(index, items))

    def score_for_percentile(self, game: str, board: str, p: str, *, ties: str | None = None) -> dict[str, Any]:
        """The least score at percentile ``p`` or above (docs/semantics/boards.md 5.2)."""
        check_ties(ties)
        share = hundredths(p)
        if self._missing is not None:
            self._unpublished(board, lambda: self._score_for(game, board, share, ties))
        return self._score_for(game, board, share, ties)

    def _score_for(self, game: str, board: str, share: int, ties: str | None) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        above = len(index) * (10000 - share)
        r = above // 10000  # the last rank inside the percentile
        score = None
        if r >= 1:
            score = nth_distinct(index, r) if ties == "dense" else index.items(r - 1, r)[0]["score"]
        return {**stamp(copy.snapshot_id, copy.published_at), "game_id": game, "board": name,
                "total_players": len(index), "percentile": share / 100, "score": score}

    def ranks(self, game: str, board: str, players: list[str], *, ties: str | None = None) -> dict[str, Any]:
        players = check_players(players)
        check_ties(ties)
        if self._missing is not None:
            self._unpublished(board, lambda: self._ranks(game, board, players, ties))
        return self._ranks(game, board, players, ties)

    def _ranks(self, game: str, board: str, players: list[str], ties: str | None) -> dict[str, Any]:
        copy, name, index = self._board(game, board)
        rows, absent = [], []
        for player in players:
            key = index.key(player)
            if key is None:
                absent.append(player)
                continue
            score = entry_fields(key)[1]
            rank, competition = index.below(key) + 1, index.better_than(score) + 1
            shown = styled_rank(ties, rank, competition, distinct_above(index, score) if ties == "dense" else 0)
            rows.append((player, score, rank, competition, shown))
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


def distinct_above(index: Board, score: int) -> int:
    """The distinct scores better than ``score`` on ``index``: one step per distinct score
    (as ``lua/board_pages.lua`` counts them), O(log n) each."""
    count, at = 0, 0
    while at < len(index):
        here = index.items(at, at + 1)[0]["score"]
        if here <= score:
            break
        count += 1
        at = index.better_than(here - 1)  # past every entry of that score
    return count


def nth_distinct(index: Board, k: int) -> int:
    """The ``k``-th distinct score from the best (the last one if there are fewer)."""
    here = index.items(0, 1)[0]["score"]
    for _ in range(k - 1):
        at = index.better_than(here - 1) if here > 0 else len(index)
        if at >= len(index):
            break
        here = index.items(at, at + 1)[0]["score"]
    return here


def _styled(index: Board, items: list[dict[str, Any]], ties: str | None) -> list[dict[str, Any]]:
    """``items`` with the ``ties`` style's ranks (``connectors.board_pages.restyle``)."""
    dense = distinct_above(index, items[0]["score"]) if ties == "dense" and items else 0
    return restyle(items, ties, dense)


def _cursors(index: Board, items: list[dict[str, Any]]) -> Callable[[int], Cursor]:
    """The cursor of ``items[i]`` (its key in the served snapshot)."""
    def cursor_of(i: int) -> Cursor:
        key = index.key(items[i]["player_id"])
        assert key is not None
        player, score, reached_at = entry_fields(key)
        return Cursor(score, reached_at, player)
    return cursor_of


class MirroredBoards:
    """The board queries of ``api.boards``: from the mirror once it serves (:attr:`BoardMirror.serves`),
    from Redis until then and while the boards keep their moves."""

    def __init__(self, mirror: BoardMirror, reader: AsyncBoardReader) -> None:
        self.mirror, self.reader = mirror, reader

    def serves_board(self, board: str) -> bool:
        """Whether the mirror answers for ``board``: it copies the live boards, and a final's standings
        (``final:``, docs/semantics/boards.md 9) are read from Redis."""
        return self.mirror.serves and not board.startswith(FINAL)

    async def top(self, game: str, board: str, n: int = 10, **asked: Any) -> dict[str, Any]:
        """``asked``: ``after``, ``ties``, ``percentile`` (docs/semantics/boards.md 5.1 to 5.3)."""
        if self.serves_board(board):
            return self.mirror.top(game, board, n, **asked)
        return await self.reader.top(game, board, n, **asked)

    async def player(self, game: str, board: str, player: str, **asked: Any) -> dict[str, Any]:
        if self.serves_board(board):
            return self.mirror.player(game, board, player, **asked)
        return await self.reader.player(game, board, player, **asked)

    async def around(self, game: str, board: str, player: str, r: int = 5, **asked: Any) -> dict[str, Any]:
        if self.serves_board(board):
            return self.mirror.around(game, board, player, r, **asked)
        return await self.reader.around(game, board, player, r, **asked)

    async def page(self, game: str, board: str, player: str, n: int = 10, **asked: Any) -> dict[str, Any]:
        if self.serves_board(board):
            return self.mirror.page(game, board, player, n, **asked)
        return await self.reader.page(game, board, player, n, **asked)

    async def score_for_percentile(self, game: str, board: str, p: str, **asked: Any) -> dict[str, Any]:
        if self.serves_board(board):
            return self.mirror.score_for_percentile(game, board, p, **asked)
        return await self.reader.score_for_percentile(game, board, p, **asked)

    async def ranks(self, game: str, board: str, players: list[str], **asked: Any) -> dict[str, Any]:
        if self.serves_board(board):
            return self.mirror.ranks(game, board, players, **asked)
        return await self.reader.ranks(game, board, players, **asked)

    async def boards(self) -> dict[str, Any]:
        return self.mirror.boards() if self.mirror.ready else await self.reader.boards()
