"""How the boards are laid out in Redis: members, scores, ``reached_at`` buckets, the layout version.

A board is a sorted set whose order is docs/semantics/boards.md section 4's. On ``best``,
``daily:*`` and ``weekly:*`` the member is the bare player id and the score a double whose
bit pattern is the entry's order key (:class:`KeyedBoard`): one ``ZADD`` writes an entry, and
``ZSCORE`` of the id finds it. On ``all``, whose totals leave no room in a double for
``reached_at``, the score is ``-score`` and the member :func:`member`, found from the id in
a small hash, one of the board's ``reached_at`` buckets (:func:`bucket_of`). Why: docs/design.md,
"One write per changed entry". The publish and read scripts (``scripts.PUBLISH_BOARDS``,
``scripts.READ_BOARD``) compute the same buckets in Lua (``lua/board_buckets.lua``) and
read keys' points groups there (``lua/board_scores.lua``).
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable
from typing import NamedTuple
from zlib import crc32


from rankflow import _native

REACHED_BYTES = 6
"""A board's sorted-set member is ``reached_at`` as 6 big-endian bytes (it is at most
253402300799999 < 2**48, docs/semantics/boards.md 1) followed by the player id's UTF-8
bytes, so that the members of one score sort by time, then by id (:func:`member`). Six
bytes, not the 15 digits of a decimal form, keep a short id's member in a smaller
allocation: 14 B for ``p0000001`` where 23 B took Redis's next size class."""

LAYOUT = "3"
"""The layout of a generation's boards (``Keys.boards_layout``), checked by every publish
and read: ``3`` is the order key in the score on ``best`` and the periods (:class:`KeyedBoard`),
binary members with ``reached_at`` in buckets on ``all``. ``2`` (buckets on every board) and
a generation without the key but with a snapshot (decimal members, one hash per board) were
written by an older rankflow: rebuild them (``rankflow rebuild --flow boards``)."""

TIME_BITS = {"best": 48, "daily": 27, "weekly": 30}
"""Bits of ``reached_at`` in a keyed board's order key: ``best`` any time (below 2^48,
docs/semantics/boards.md 1), a day's 86,400,000 ms below 2^27 and a week's 604,800,000 below 2^30
as offsets from the period's start (a period board's ``reached_at`` is a ``played_at`` in it)."""

KEY_LIMIT = 2047 << 52
"""The bit pattern of +inf: every key below it is that of a finite, non-negative double, and
those order as their bit patterns do (63 bits of order, less the top exponent)."""

_DOUBLE, _WORD = struct.Struct(">d"), struct.Struct(">Q")
_DAY_MS = 86_400_000


class BoardScoreTooHigh(ValueError):
    """A period board's total is above what its order key holds (:attr:`KeyedBoard.cap`), or an
    entry's ``reached_at`` is outside its period (which the rules never make)."""


class KeyedBoard(NamedTuple):
    """A board whose sorted-set score is its entries' order key, members bare ids.

    The key is ``(cap - score) << bits | (reached_at - origin)``: ascending keys are the board top
    down (a greater score first, then an earlier ``reached_at``), and Redis orders equal keys by
    member bytes, the id's, as section 4 does. The score is the double with that bit pattern.
    ``cap`` is the greatest score the key holds: 10,000 on ``best`` (one result's points), on a
    day 68,685,922,303 and on a week 8,585,740,287 (all a key below :data:`KEY_LIMIT` leaves).

    >>> day = keyed("daily:2027-01-06")
    >>> day.fields(day.score(120, 1_799_193_600_123))
    (120, 1799193600123)
    >>> day.score(120, 1_799_193_600_123) < day.score(120, 1_799_193_600_124) < day.score(119, 1_799_193_600_000)
    True
    """

    bits: int
    cap: int
    origin: int

    def key(self, score: int, reached_at: int) -> int:
        if not 0 <= score <= self.cap:
            raise BoardScoreTooHigh(f"a score of {score} is above {self.cap}, the most this board's key holds")
        offset = reached_at - self.origin
        if not 0 <= offset < 1 << self.bits:
            raise BoardScoreTooHigh(f"reached_at {reached_at} is outside the board's period")
        return (self.cap - score) << self.bits | offset

    def score(self, score: int, reached_at: int) -> float:
        """The sorted-set score of an entry."""
        return float(_DOUBLE.unpack(_WORD.pack(self.key(score, reached_at)))[0])

    def scores_json(self, entries: dict[str, tuple[int, int]]) -> bytes:
        """Each player's sorted-set score (:meth:`score`), of ``{player: (score, reached_at)}``, as the
        JSON object the publish script takes: the publisher's per-entry work, in the native kernel
        (``keyed_scores``: 0.53 µs an entry in a Python loop).

        >>> import orjson
        >>> best = keyed("best")
        >>> orjson.loads(best.scores_json({"ana": (70, 5)})) == {"ana": best.score(70, 5)}
        True
        """
        made = _native.keyed_scores(entries, self.bits, self.cap, self.origin)
        if made is None:  # an entry the key cannot hold: say which
            for score, reached_at in entries.values():
                self.key(score, reached_at)
        assert made is not None
        return made

    def fields(self, score: float) -> tuple[int, int]:
        """``(score, reached_at)`` of a sorted-set score."""
        key = _WORD.unpack(_DOUBLE.pack(score))[0]
        return self.cap - (key >> self.bits), self.origin + (key & ((1 << self.bits) - 1))

    def cursor(self, score: int, reached_at: int, player: str) -> tuple[str, bytes]:
        """The sorted-set score and member a page's cursor stands for (docs/semantics/boards.md
        5.1), as the read script takes them: a cursor of another board may fall outside this
        one's keys, then it stands before or after every entry of its score (member ``b""``,
        or ``b"\xff"``, which no UTF-8 id reaches).

        >>> keyed("best").cursor(10_001, 5, "ana")
        ('0.0', b'')
        """
        if score > self.cap:
            return repr(0.0), b""
        offset = reached_at - self.origin
        if offset < 0:
            return repr(self.score(score, self.origin)), b""
        if offset >> self.bits:
            return repr(self.score(score, self.origin + (1 << self.bits) - 1)), b"\xff"
        return repr(self.score(score, reached_at)), player.encode()


def keyed(board: str) -> KeyedBoard | None:
    """The order key of ``board`` (a concrete name); None for ``all`` (and for any other name).
    A period's final standings (``final:<board>``, docs/semantics/boards.md 9.2) are its board's
    keys renamed: the board's order key.

    >>> keyed("weekly:2027-W01").origin, keyed("best").cap, keyed("all")
    (1799020800000, 10000, None)
    >>> keyed("final:daily:2027-01-06") == keyed("daily:2027-01-06"), keyed("season:s1")
    (True, None)
    """
    kind, _, period = board.partition("@")[0].removeprefix("final:").partition(":")  # a group's: its board's
    bits = TIME_BITS.get(kind)
    if bits is None:
        return None
    if kind == "best":
        return KeyedBoard(bits, 10_000, 0)
    try:
        if kind == "daily":
            day = dt.date.fromisoformat(period)
        else:
            year, _, week = period.partition("-W")
            day = dt.date.fromisocalendar(int(year), int(week), 1)
    except ValueError:  # an alias ('daily') or a name no board has: nothing is read or written with it
        return None
    return KeyedBoard(bits, (KEY_LIMIT >> bits) - 1, (day - dt.date(1970, 1, 1)).days * _DAY_MS)


def entries_of(board: str) -> Callable[[bytes, bytes | float], tuple[str, int, int]]:
    """What makes a sorted-set member and score of ``board`` (concrete) its ``(player, score, reached_at)``.

    >>> entries_of("best")(b"ana", keyed("best").score(70, 5)), entries_of("all")(member("bo", 9), b"-70")
    (('ana', 70, 5), ('bo', 70, 9))
    """
    codec = keyed(board)
    if codec is None:
        def of_member(m: bytes, score: bytes | float) -> tuple[str, int, int]:
            player, reached_at = member_fields(m)
            return player, -int(float(score)), reached_at
        return of_member

    def of_id(m: bytes, score: bytes | float) -> tuple[str, int, int]:
        points, reached_at = codec.fields(float(score))
        return m.decode(), points, reached_at
    return of_id


def score_of(board: str, score: bytes | float) -> int:
    """The score (points) of a sorted-set score of ``board`` (concrete), as a reply gives it."""
    codec = keyed(board)
    return -int(float(score)) if codec is None else codec.fields(float(score))[0]


def cursor_key(board: str, score: int, reached_at: int, player: str) -> tuple[str | int, bytes]:
    """The sorted-set score and member a page's cursor stands for on ``board`` (:meth:`KeyedBoard.cursor`)."""
    codec = keyed(board)
    return (-score, member(player, reached_at)) if codec is None else codec.cursor(score, reached_at, player)

BUCKET_LOAD = 48
"""Players per ``reached_at`` bucket, on average, at most: before a snapshot's entries go
in, the board takes buckets until its players and the snapshot's, all new at most, would
average no more (a bucket outgrown into a hashtable would stay one).
A bucket stays a listpack (about 20 B per player, where one big hash costs some 70 B)
while it holds at most ``hash-max-listpack-entries`` players (128 by default): the unsplit
buckets of linear hashing hold up to twice the average (:func:`bucket_of`)."""


def member(player: str, reached_at: int) -> bytes:
    """A board's sorted-set member (:data:`REACHED_BYTES`).

    >>> member("ana", 1798884000000)
    b'\\x01\\xa2\\xd5\\xd7\\x81\\x00ana'
    >>> member_fields(member("é", 5))
    ('é', 5)
    """
    return reached_at.to_bytes(REACHED_BYTES, "big") + player.encode()


def member_fields(m: bytes) -> tuple[str, int]:
    """``(player, reached_at)`` of a sorted-set member."""
    return m[REACHED_BYTES:].decode(), int.from_bytes(m[:REACHED_BYTES], "big")


def player_hash(player: str) -> int:
    """The hash that places a player in a bucket: the CRC-32 of the id's UTF-8 bytes
    (zlib's). Callers send it with the player: computing it in Lua would cost Redis more
    than the write itself (SHA-1 there: some 2 µs per entry); the scripts compute it
    (``crc32`` in ``lua/board_buckets.lua``) only when a bucket splits.

    >>> player_hash("ana")
    2006937570
    """
    return crc32(player.encode())


def bucket_of(player: str, buckets: int) -> int:
    """The bucket (of ``buckets``) holding ``player``'s ``reached_at``: linear hashing, as
    ``lua/board_buckets.lua`` computes it. With ``low`` the greatest power of two <= ``buckets``,
    buckets below ``buckets - low`` were split in two (``b`` and ``b + low``), so a board
    grows one bucket at a time, moving one bucket's players, never all of them.

    >>> [bucket_of("ana", n) for n in (1, 2, 3, 4, 5, 6, 7)]
    [0, 0, 2, 2, 2, 2, 2]
    """
    h = player_hash(player)
    low = 1 << (buckets.bit_length() - 1)
    b = h % low
    return h % (2 * low) if b < buckets - low else b


class RedisBoardsLayout(RuntimeError):
    """The generation's boards were written in another layout than :data:`LAYOUT`."""


def layout_message(found: str) -> str:
    """What a user reads when Redis holds boards of another layout (found: its version)."""
    return (f"Redis holds boards in layout {found}, written by another rankflow version; this one reads and "
            f"writes layout {LAYOUT}: rebuild the boards (`rankflow rebuild --flow boards`) or use a new --namespace")
