"""Match-result signatures (BOARDS.md section 1, check 6).

A match server signs what it computed; the flow and the ingest endpoint check it.
The signed bytes name each id with its length in UTF-8 bytes, so an id holding
``|`` or ``:`` cannot make two different results sign alike.
"""

from __future__ import annotations

import hashlib
import hmac


def canonical_bytes(game_id: str, match_id: str, player_id: str, points: int, played_at: int) -> bytes:
    """The bytes a result's signature covers.

    >>> canonical_bytes("g1", "m|1", "ana", 50, 7)
    b'2:g1|3:m|1|3:ana|50|7'
    >>> canonical_bytes("é", "m", "p", 0, 0)  # lengths are in bytes: é is two
    b'2:\\xc3\\xa9|1:m|1:p|0|0'
    """
    parts = []
    for value in (game_id, match_id, player_id):
        b = value.encode()
        parts.append(b"%d:%s" % (len(b), b))
    return b"|".join(parts) + b"|%d|%d" % (points, played_at)


def sign(key: bytes, game_id: str, match_id: str, player_id: str, points: int, played_at: int) -> str:
    """The lowercase hex HMAC-SHA256 a match server sends as ``sig``.

    >>> sign(bytes.fromhex("00" * 32), "g1", "m1", "ana", 50, 0)[:16]
    'c7bbad1bed2c7aa8'
    """
    return hmac.new(key, canonical_bytes(game_id, match_id, player_id, points, played_at), hashlib.sha256).hexdigest()


def parse_key(text: str) -> bytes:
    """A signing key given as hex (``--signing-key``, ``RANKFLOW_SIGNING_KEY``).

    >>> parse_key("00ff")
    b'\\x00\\xff'
    >>> parse_key("xyz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: the signing key must be hexadecimal (an even number of 0-9a-f digits), at least 16 bytes...
    """
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if not key:
        raise ValueError("the signing key must be hexadecimal (an even number of 0-9a-f digits), at least 16 bytes"
                         " are recommended")
    return key
