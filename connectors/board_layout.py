"""How the boards are laid out in Redis: members, ``reached_at`` buckets, the layout version.

A board is a sorted set whose order is docs/semantics/boards.md section 4's (score
``-score``, member :func:`member`), and a player's member is found from their id in a
small hash, one of the board's ``reached_at`` buckets (:func:`bucket_of`). Measured on
500k one-board entries (Redis 7.0): 131 B per entry, against 214 B with decimal members
and one hash per board, and 110 B for a sorted set of bare ids that cannot order ties by
time. The publish and read scripts (``scripts.PUBLISH_BOARDS``, ``scripts.READ_BOARD``)
compute the same buckets in Lua (``lua/board_buckets.lua``).
"""

from __future__ import annotations

from zlib import crc32

REACHED_BYTES = 6
"""A board's sorted-set member is ``reached_at`` as 6 big-endian bytes (it is at most
253402300799999 < 2**48, docs/semantics/boards.md 1) followed by the player id's UTF-8
bytes, so that the members of one score sort by time, then by id (:func:`member`). Six
bytes, not the 15 digits of a decimal form, keep a short id's member in a smaller
allocation: 14 B for ``p0000001`` where 23 B took Redis's next size class."""

LAYOUT = "2"
"""The layout of a generation's boards (``Keys.boards_layout``), checked by every publish
and read: ``2`` is binary members with ``reached_at`` in buckets. A generation without it
but with a snapshot was written by an older rankflow (decimal members, one hash per board):
rebuild it (``rankflow rebuild --flow boards``)."""

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
