"""Every board in memory, once: what the API's board mirror answers from (``api.board_mirror``).

Contract:

* :class:`BoardIndex` is one board in the order of docs/semantics/boards.md 4 (score descending,
  ``reached_at`` ascending, player id byte-wise): the packed keys (:func:`entry_key`) in the
  native kernel's ``BoardKeys`` (the keys in order, their first 16 bytes inline in blocks, and
  each player's key: a rank in a fraction of the time a ``SortedList`` of ``bytes`` and a dict
  took, docs/design.md), so the rank of any player, a slice by rank and the number of strictly
  better scores are each O(log n).
* :class:`BoardsCopy` is every live board and alias.
* :class:`ChangeSet` is one snapshot's changes as the publish script streams them
  (``PUBLISH_BOARDS_LUA``), cut into small operations; they are absolute (the new
  score and ``reached_at``), so applying them over any older state converges.
* :class:`LiveBoards` applies new change sets to the live boards in slices of a few
  hundred operations (the caller yields between them, so applying a big snapshot never
  holds the event loop for long), and serves (:class:`Served`) the boards as of the
  last change set wholly applied: while one is half applied, each query corrects what
  it reads of a board it touched by what it changed so far (the board's kernel records it:
  :class:`BoardView`). So an answer is always wholly at one snapshot, and each change
  is applied once.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from rankflow._native import BoardKeys

BoardId = tuple[str, str]  # (game, board)

_HEAD = struct.Struct(">QQ")
_TOP_SCORE = 2**64 - 1

UPSERT, CREATE, DROP, ALIAS = 0, 1, 2, 3
"""Operation kinds of a change set: ``(UPSERT, board, player, key)``, ``(CREATE,
board)`` (the board exists from now on, even before its entries), ``(DROP, board)``,
``(ALIAS, game, [daily, weekly])``, applied in the publish script's order."""


def entry_key(player: str, score: int, reached_at: int) -> bytes:
    """An entry packed so that byte order is board order: ``2**64 - 1 - score`` and
    ``reached_at`` as big-endian 64-bit integers, then the player id in UTF-8.

    >>> sorted([entry_key("bo", 5, 2), entry_key("ana", 5, 2), entry_key("cy", 7, 9), entry_key("a", 5, 1)])[0][16:]
    b'cy'
    >>> entry_fields(entry_key("é", 3, 10))
    ('é', 3, 10)
    """
    return _HEAD.pack(_TOP_SCORE - score, reached_at) + player.encode()


def key_of_member(member: bytes, negated_score: float, reached_bytes: int) -> bytes:
    """:func:`entry_key` of a board's sorted-set member and score: the member is
    ``reached_at`` as ``reached_bytes`` big-endian bytes, then the player id
    (``connectors.board_layout.member``)."""
    return (_HEAD.pack(_TOP_SCORE + int(negated_score), int.from_bytes(member[:reached_bytes], "big"))
            + member[reached_bytes:])


def entry_fields(key: bytes) -> tuple[str, int, int]:
    """``(player, score, reached_at)`` of a key."""
    inverted, reached_at = _HEAD.unpack_from(key)
    return key[16:].decode(), _TOP_SCORE - inverted, reached_at


def score_floor(score: int) -> bytes:
    """A key before every entry of ``score`` and after every better one."""
    return _HEAD.pack(_TOP_SCORE - score, 0)


def key_score(key: bytes) -> int:
    ranked: int = _HEAD.unpack_from(key)[0]
    return _TOP_SCORE - ranked


class BoardIndex:
    """One board's entries in rank order, and each player's key (the live board), held by the
    native kernel (``BoardKeys``: no Python object per entry)."""

    __slots__ = ("entries",)

    def __init__(self, entries: BoardKeys | None = None) -> None:
        self.entries = entries if entries is not None else BoardKeys()

    @classmethod
    def of(cls, keys: Iterable[bytes]) -> BoardIndex:
        """A board from its keys, one per player, in any order. O(n log n).

        >>> board = BoardIndex.of([entry_key("ana", 5, 1), entry_key("bo", 7, 3)])
        >>> len(board), board.rank0("ana"), board.key("cy")
        (2, 1, None)
        """
        return cls(BoardKeys(list(keys)))

    def __len__(self) -> int:
        return len(self.entries)

    def upsert(self, player: str, key: bytes) -> bytes | None:
        """Put ``player`` at ``key`` (a key names its player: :func:`entry_key`); the key it had
        (None if it was not on the board, ``key`` itself if unchanged). O(log n).

        >>> board = BoardIndex()
        >>> board.upsert("ana", entry_key("ana", 5, 1)) is None, board.upsert("ana", entry_key("ana", 6, 2))[16:]
        (True, b'ana')
        """
        return self.entries.upsert(key)

    def key(self, player: str) -> bytes | None:
        """The player's key, None if not on the board. O(1).

        >>> BoardIndex.of([entry_key("ana", 5, 1)]).key("ana") == entry_key("ana", 5, 1)
        True
        """
        return self.entries.key(player)

    def below(self, key: bytes) -> int:
        """How many entries come before ``key`` (on the board or not). O(log n).

        >>> BoardIndex.of([entry_key("ana", 5, 1), entry_key("bo", 7, 3)]).below(entry_key("cy", 6, 0))
        1
        """
        return self.entries.bisect_left(key)

    def rank0(self, player: str) -> int | None:
        """The player's rank - 1, None if not on the board. O(log n)."""
        return self.entries.rank0(player)

    def better_than(self, score: int) -> int:
        """How many entries have a strictly greater score. O(log n).

        >>> BoardIndex.of([entry_key("ana", 5, 1), entry_key("bo", 7, 3), entry_key("cy", 7, 1)]).better_than(5)
        2
        """
        return self.entries.bisect_left(score_floor(score))

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Entries ``start .. stop - 1`` (0-based) as answer items with both ranks. O(log n + stop - start)."""
        return answer_items(self.entries.islice(max(0, start), max(0, stop)), start, self.better_than)

    def _check(self) -> None:
        """The invariants: the order sorted, every player's key in it once, nothing else."""
        self.entries._check()
        keys = self.entries.keys()
        assert keys == sorted(keys) and all(self.key(entry_fields(k)[0]) == k for k in keys)


def answer_items(keys: list[bytes], start: int, better_than: Any) -> list[dict[str, Any]]:
    """``keys``, the entries from rank ``start + 1`` on, as answer items with both ranks."""
    if not keys:
        return []
    out: list[dict[str, Any]] = []
    previous = key_score(keys[0])
    competition = better_than(previous) + 1
    rank = start + 1
    for key in keys:
        player, score, _ = entry_fields(key)
        if score != previous:
            competition, previous = rank, score
        out.append({"rank": rank, "competition_rank": competition, "player_id": player, "score": score})
        rank += 1
    return out


class BoardView:
    """A live board as it was before the change set being applied: the same queries as
    :class:`BoardIndex`, each O(log n) plus, for :meth:`items`, O(changes).

    The board's kernel (``BoardKeys``) records what the change set did to it since
    :meth:`InFlight.touch` began it: the keys it added that are still there, the keys it
    removed that were there before it, each touched player's key before it. So the board
    before is ``live - added + removed``, and any count of entries before a key is the live
    count corrected by two bisections (``BoardKeys.below_before``); the prepared rank reads
    the same record (``BoardKeys.player_reply``).
    """

    __slots__ = ("live",)

    def __init__(self, live: BoardIndex) -> None:
        self.live = live

    def __len__(self) -> int:
        return self.live.entries.len_before()

    def key(self, player: str) -> bytes | None:
        return self.live.entries.key_before(player)

    def below(self, key: bytes) -> int:
        return self.live.entries.below_before(key)

    def rank0(self, player: str) -> int | None:
        key = self.key(player)
        return None if key is None else self.below(key)

    def better_than(self, score: int) -> int:
        return self.below(score_floor(score))

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Entries ``start .. stop - 1``. An entry still live moved by at most
        ``len(removed)`` places up and ``len(added)`` down, so the live entries from
        ``start - len(removed)`` to ``stop + len(added)``, less the added ones, with the
        removed ones after the live entry before them, hold every entry of those ranks, in
        a run of the board before from its first one (whose rank :meth:`below` gives) on.
        O(log n + changes)."""
        order = self.live.entries
        added_keys, removed = order.flight_keys()
        if stop <= start:
            return []
        lo, hi = min(len(order), max(0, start - len(removed))), min(len(order), stop + len(added_keys))
        window = order.islice(lo, hi)
        first = bisect_right(removed, order[lo - 1]) if lo > 0 else 0  # none before the window's neighbour
        added = set(added_keys)
        run = sorted([k for k in window if k not in added] + removed[first:])
        if not run:
            return []
        at = self.below(run[0])  # at most start: every rank from start on that exists is in run
        return answer_items(run[start - at:stop - at], start, self.better_than)


@dataclass
class ChangeSet:
    """One snapshot's changes, as operations (see :data:`UPSERT`), and when the snapshot was
    published (None: not known, a snapshot an older rankflow stored)."""

    snapshot_id: int
    ops: list[tuple[Any, ...]] = field(default_factory=list)
    published_at: int | None = None


def stream_ops(aliases: bytes, boards: bytes, dropped: bytes, batch: int = 256) -> Iterator[list[tuple[Any, ...]]]:
    """A ``board_changes`` entry's operations, in parts of about ``batch`` entries: building
    a key costs a µs or two, so a caller that must stay responsive yields between parts."""
    ops: list[tuple[Any, ...]] = []
    flat = orjson.loads(aliases)
    for i in range(0, len(flat), 2):
        ops.append((ALIAS, flat[i], orjson.loads(flat[i + 1])))
    changed = orjson.loads(boards)
    for i in range(0, len(changed), 2):
        bid = (changed[i][0], changed[i][1])
        ops.append((CREATE, bid))
        entries = list(changed[i + 1].items())
        for start in range(0, len(entries), batch):
            ops.extend((UPSERT, bid, player, entry_key(player, e[0], e[1]))
                       for player, e in entries[start:start + batch])
            yield ops
            ops = []
    ops.extend((DROP, (game, board)) for game, board in orjson.loads(dropped))
    yield ops


class BoardsCopy:
    """Every live board and alias; ``snapshot_id`` the last change set wholly applied
    (``published_at`` when its snapshot was published).

    ``at`` counts the change sets applied (numbered as :class:`LiveBoards` numbers
    them) and ``op`` the operations applied of the next one.
    """

    def __init__(self, snapshot_id: int | None, boards: dict[BoardId, BoardIndex],
                 aliases: dict[str, list[str | None]], published_at: int | None = None) -> None:
        self.snapshot_id = snapshot_id
        self.published_at = published_at
        self.boards = boards
        self.aliases = aliases
        self.at = 0
        self.op = 0

    def apply(self, ops: Iterable[tuple[Any, ...]], flight: InFlight) -> None:
        """Apply ``ops`` to the live boards, recording in ``flight`` what they were before."""
        boards = self.boards
        for op in ops:
            kind = op[0]
            if kind == UPSERT:
                board = boards[op[1]]
                flight.touch(op[1], board)
                board.upsert(op[2], op[3])
            elif kind == CREATE:
                if op[1] not in boards:
                    flight.boards.setdefault(op[1], None)
                    boards[op[1]] = BoardIndex()
            elif kind == DROP:
                gone = boards.pop(op[1], None)
                if gone is not None:
                    flight.boards.setdefault(op[1], gone)
            else:
                if op[1] not in flight.aliases:
                    flight.aliases[op[1]] = self.aliases.get(op[1], _ABSENT)
                self.aliases[op[1]] = op[2]


_ABSENT: list[str | None] = []  # an alias the game did not have before the change set


class InFlight:
    """What the change set being applied changed so far: per board it touched, the board
    object it started from (None: it did not exist), whose kernel records what the change
    set does to it (:meth:`touch`); per game whose aliases it set, the aliases before."""

    __slots__ = ("boards", "aliases")

    def __init__(self) -> None:
        self.boards: dict[BoardId, BoardIndex | None] = {}
        self.aliases: dict[str, list[str | None]] = {}

    def touch(self, bid: BoardId, board: BoardIndex) -> None:
        """Before a change of the live ``board``: the first one begins its record (``BoardKeys.
        begin``). A board the change set made (dropped the one it started from, made a new
        one) records nothing: the one it started from is what is served."""
        if bid not in self.boards:
            self.boards[bid] = board
            board.entries.begin()

    def settle(self) -> None:
        """The change set is wholly applied: every board it touched is served as it is."""
        for board in self.boards.values():
            if board is not None:
                board.entries.settle()


Board = BoardIndex | BoardView


class Served:
    """The boards as of the last change set wholly applied, read from the live boards
    (:class:`InFlight` undoes what the next one changed so far)."""

    __slots__ = ("live", "flight")

    def __init__(self, live: BoardsCopy, flight: InFlight) -> None:
        self.live, self.flight = live, flight

    @property
    def snapshot_id(self) -> int | None:
        return self.live.snapshot_id

    @property
    def published_at(self) -> int | None:
        return self.live.published_at

    def board(self, bid: BoardId) -> Board | None:
        """One board, None if it was not there. O(1)."""
        touched = self.flight.boards
        if bid not in touched:
            return self.live.boards.get(bid)
        start = touched[bid]
        return None if start is None else BoardView(start) if start.entries.recorded() else start

    @property
    def boards(self) -> dict[BoardId, Board]:
        """Every board. O(boards)."""
        out: dict[BoardId, Board] = {bid: b for bid, b in self.live.boards.items() if bid not in self.flight.boards}
        for bid in self.flight.boards:
            board = self.board(bid)
            if board is not None:
                out[bid] = board
        return out

    @property
    def aliases(self) -> dict[str, list[str | None]]:
        out = dict(self.live.aliases)
        for game, before in self.flight.aliases.items():
            if before is _ABSENT:
                out.pop(game, None)
            else:
                out[game] = before
        return out

    def resolve(self, game: str, board: str) -> str:
        """The concrete board an alias names now; the alias itself when it names none."""
        if board in ("daily", "weekly"):
            before = self.flight.aliases.get(game)
            periods = self.live.aliases.get(game) if before is None else None if before is _ABSENT else before
            period = None if periods is None else periods[0 if board == "daily" else 1]
            if period is not None:
                return f"{board}:{period}"
        return board

    def entries(self) -> int:
        return sum(len(b) for b in self.boards.values())


class LiveBoards:
    """The boards once, taking new change sets a few operations at a time, and served as of
    the last change set wholly applied (:attr:`serving`).

    A second copy that takes each change set before the served one swaps with it applies
    every change twice and holds every entry twice; here each is applied once, and a query
    that comes while a change set is half applied corrects what it reads by what that
    change set changed so far (each board's kernel records it: :class:`BoardView`).
    """

    def __init__(self, copy: BoardsCopy) -> None:
        self.live = copy
        self._log: list[ChangeSet] = []
        self._base = copy.at  # the number of the log's first change set
        self._flight = InFlight()

    @property
    def serving(self) -> Served:
        return Served(self.live, self._flight)

    @property
    def flight(self) -> object:
        """A token of the change set being applied: :meth:`untouched` says whether the live
        boards have changed since it was taken."""
        return self._flight

    def untouched(self, flight: object) -> bool:
        """Whether ``flight`` (:attr:`flight`) is still current and no operation of it applied:
        then the live boards are the served ones, and a board read from them needs no
        correction. O(1).

        >>> live = LiveBoards(BoardsCopy(1, {}, {}))
        >>> token = live.flight
        >>> live.untouched(token)
        True
        >>> live.add(ChangeSet(2, [(CREATE, ("g", "all"))]))
        >>> live.step(10), live.untouched(token)
        (True, False)
        """
        return flight is self._flight and not self._flight.boards and not self._flight.aliases

    @property
    def pending(self) -> bool:
        """Whether change sets are known that are not wholly applied yet."""
        return bool(self._log)

    def add(self, change: ChangeSet) -> None:
        self._log.append(change)

    def step(self, limit: int) -> bool:
        """Apply at most ``limit`` operations (whole change sets without operations do not
        count). True if a change set was wholly applied: the served snapshot moved on."""
        copy, moved = self.live, False
        while self._log:
            change = self._log[0]
            stop = min(copy.op + limit, len(change.ops))
            copy.apply(change.ops[copy.op:stop], self._flight)
            limit -= stop - copy.op
            if stop < len(change.ops):
                copy.op = stop
                return moved
            copy.at, copy.op, copy.snapshot_id = copy.at + 1, 0, change.snapshot_id
            copy.published_at = change.published_at
            self._flight.settle()
            self._flight, moved = InFlight(), True
            del self._log[0]
            if limit <= 0:
                break
        return moved
