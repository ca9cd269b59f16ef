"""Match-result signatures (docs/semantics/boards.md section 1, check 6).

A match server signs what it computed (here: the generator, the benchmarks' logs and
the tests sign); the flow and the ingest endpoint check it in the Rust kernel
(``native/src/signature.rs``, through ``state.score_events``).
The signed bytes name each id with its length in UTF-8 bytes, so an id holding
``|`` or ``:`` cannot make two different results sign alike.
"""

from __future__ import annotations

import hmac


def canonical_bytes(game_id: str, match_id: str, player_id: str, points: int, played_at: int) -> bytes:
    """The bytes a result's signature covers.

    >>> canonical_bytes("g1", "m|1", "ana", 50, 7)
    b'2:g1|3:m|1|3:ana|50|7'
    >>> canonical_bytes("é", "m", "p", 0, 0)  # lengths are in bytes: é is two
    b'2:\\xc3\\xa9|1:m|1:p|0|0'
    """
    g, m, p = game_id.encode(), match_id.encode(), player_id.encode()
    return b"%d:%s|%d:%s|%d:%s|%d|%d" % (len(g), g, len(m), m, len(p), p, points, played_at)


def sign(key: bytes, game_id: str, match_id: str, player_id: str, points: int, played_at: int) -> str:
    """The lowercase hex HMAC-SHA256 a match server sends as ``sig`` (once per result: a
    the check is the kernel's).

    >>> sign(bytes.fromhex("00" * 32), "g1", "m1", "ana", 50, 0)[:16]
    'c7bbad1bed2c7aa8'
    """
    return hmac.digest(key, canonical_bytes(game_id, match_id, player_id, points, played_at), "sha256").hex()


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
