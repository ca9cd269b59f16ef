"""Every board in memory, twice: what the API's board mirror answers from (``api.board_mirror``).

Contract:

* :class:`BoardIndex` is one board in the order of docs/semantics/boards.md 4 (score descending,
  ``reached_at`` ascending, player id byte-wise): a ``SortedList`` of packed keys
  (:func:`entry_key`) plus a dict player -> key, so the rank of any player, a
  slice by rank and the number of strictly better scores are each O(log n).
* :class:`BoardsCopy` is every board and alias of one snapshot.
* :class:`ChangeSet` is one snapshot's changes as the publish script streams them
  (``PUBLISH_BOARDS_LUA``), cut into small operations; they are absolute (the new
  score and ``reached_at``), so applying them over any older state converges.
* :class:`DoubleBuffer` keeps two copies: queries read the *serving* one, which
  is always wholly at one snapshot; new change sets are applied to the *standby*
  one in slices of a few hundred operations (the caller yields between them, so
  applying a big snapshot never holds the event loop for long), and when it has
  applied every change set it knows, the two swap in one assignment, the snapshot
  id with them. The other copy then catches up from where it was, with the same
  change sets.

The two copies share their keys and player ids (built once, when a change set is
read), so the second copy costs only its dict and list slots.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from sortedcontainers import SortedList

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
    """One board's entries in rank order, and each player's key."""

    __slots__ = ("order", "keys")

    def __init__(self, order: SortedList[bytes] | None = None, keys: dict[str, bytes] | None = None) -> None:
        self.order = order if order is not None else SortedList()
        self.keys = keys if keys is not None else {}

    @classmethod
    def of(cls, keys: dict[str, bytes], ordered: list[bytes]) -> BoardIndex:
        """A board from its keys per player and the same keys in board order."""
        return cls(SortedList(ordered), keys)

    def __len__(self) -> int:
        return len(self.order)

    def upsert(self, player: str, key: bytes) -> None:
        old = self.keys.get(player)
        if old == key:
            return
        if old is not None:
            self.order.remove(old)
        self.order.add(key)
        self.keys[player] = key

    def rank0(self, player: str) -> int | None:
        """The player's rank - 1, None if not on the board."""
        key = self.keys.get(player)
        return None if key is None else self.order.index(key)

    def better_than(self, score: int) -> int:
        """How many entries have a strictly greater score."""
        return self.order.bisect_left(score_floor(score))

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Entries ``start .. stop - 1`` (0-based) as answer items with both ranks."""
        keys = list(self.order.islice(start, stop))
        if not keys:
            return []
        out: list[dict[str, Any]] = []
        previous = key_score(keys[0])
        competition = self.better_than(previous) + 1
        rank = start + 1
        for key in keys:
            player, score, _ = entry_fields(key)
            if score != previous:
                competition, previous = rank, score
            out.append({"rank": rank, "competition_rank": competition, "player_id": player, "score": score})
            rank += 1
        return out


@dataclass
class ChangeSet:
    """One snapshot's changes, as operations (see :data:`UPSERT`)."""

    snapshot_id: int
    ops: list[tuple[Any, ...]] = field(default_factory=list)

    @classmethod
    def from_stream(cls, snapshot_id: int, aliases: bytes, boards: bytes, dropped: bytes) -> ChangeSet:
        """From a ``board_changes`` entry's fields (``PUBLISH_BOARDS_LUA``), at once."""
        return cls(snapshot_id, [op for part in stream_ops(aliases, boards, dropped) for op in part])


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
    """Every board and alias, at ``snapshot_id`` once its change sets are wholly applied.

    ``at`` counts the change sets applied (numbered as :class:`DoubleBuffer` numbers
    them) and ``op`` the operations applied of the next one.
    """

    def __init__(self, snapshot_id: int | None, boards: dict[BoardId, BoardIndex],
                 aliases: dict[str, list[str | None]]) -> None:
        self.snapshot_id = snapshot_id
        self.boards = boards
        self.aliases = aliases
        self.at = 0
        self.op = 0

    def twin(self) -> BoardsCopy:
        """A second copy of the same state, sharing the keys (each board's list re-sorted: O(n) when sorted)."""
        boards = {bid: BoardIndex(SortedList(b.order), dict(b.keys)) for bid, b in self.boards.items()}
        twin = BoardsCopy(self.snapshot_id, boards, dict(self.aliases))
        twin.at, twin.op = self.at, self.op
        return twin

    def apply(self, ops: Iterable[tuple[Any, ...]]) -> None:
        boards = self.boards
        for op in ops:
            kind = op[0]
            if kind == UPSERT:
                boards[op[1]].upsert(op[2], op[3])
            elif kind == CREATE:
                if op[1] not in boards:
                    boards[op[1]] = BoardIndex()
            elif kind == DROP:
                boards.pop(op[1], None)
            else:
                self.aliases[op[1]] = op[2]

    def resolve(self, game: str, board: str) -> str:
        """The concrete board an alias names now; the alias itself when it names none."""
        if board in ("daily", "weekly"):
            periods = self.aliases.get(game)
            period = None if periods is None else periods[0 if board == "daily" else 1]
            if period is not None:
                return f"{board}:{period}"
        return board

    def entries(self) -> int:
        return sum(len(b) for b in self.boards.values())


class DoubleBuffer:
    """Two copies of the boards: one serves, the other takes the new change sets."""

    def __init__(self, copy: BoardsCopy, twin: BoardsCopy | None = None) -> None:
        self.serving = copy
        self.standby = twin if twin is not None else copy.twin()
        self._log: list[ChangeSet] = []
        self._base = copy.at  # the number of the log's first change set

    @property
    def pending(self) -> bool:
        """Whether the standby copy has change sets to apply (the serving copy may then
        show an older snapshot than the newest known)."""
        return self.standby.at < self._base + len(self._log)

    def add(self, change: ChangeSet) -> None:
        self._log.append(change)

    def step(self, limit: int) -> bool:
        """Apply at most ``limit`` operations to the standby copy (whole change sets
        without operations do not count); swap the copies when it has applied every
        known change set. True if they swapped."""
        copy, end = self.standby, self._base + len(self._log)
        while copy.at < end:
            change = self._log[copy.at - self._base]
            stop = min(copy.op + limit, len(change.ops))
            copy.apply(change.ops[copy.op:stop])
            limit -= stop - copy.op
            if stop < len(change.ops):
                copy.op = stop
                return False
            copy.at, copy.op, copy.snapshot_id = copy.at + 1, 0, change.snapshot_id
            if limit <= 0 and copy.at < end:
                return False
        if copy.at <= self.serving.at:
            return False  # nothing new: both copies show the same snapshot
        self.serving, self.standby = copy, self.serving
        self._forget()
        return True

    def _forget(self) -> None:
        """Drop the change sets both copies have applied."""
        done = min(self.serving.at, self.standby.at) - self._base
        if done > 0:
            del self._log[:done]
            self._base += done
