"""Match results and their stateless validation (docs/semantics/boards.md section 1, checks 1 to 6).

Every score event passes through :func:`parse_score_records` once. One that fails a
check changes nothing and becomes a :class:`~rankflow.state.events.DeadLetter` naming
the first failed check; it never raises out of the flow. Checks 7 and 8 need the
player's newest receipt, so they belong to the per-player rules
(:mod:`rankflow.state.board_rules`), as do duplicates and conflicts.

JSON is read by orjson, which is strict (no ``NaN``, no lone surrogate escape, UTF-8
only) but stops at 64-bit integers: it reads a bigger integer as a float, or fails
on one beyond a double. JSON has no such limit and docs/semantics/boards.md says such a number is an
integer (out of range), so whatever orjson does not take as is, the standard
library's ``json`` decides, with the RFC 8259 rules it lacks added back
(:mod:`rankflow.state.json_exact`, shared with the activity flow). Here an integer
only needs a range check, so a literal longer than 40 digits becomes a sentinel
beyond every range instead of its exact value: cheap, whatever its length.
"""

from __future__ import annotations

import functools
import hmac
from typing import Any, NamedTuple

import orjson

from rankflow.state import json_exact
from rankflow.state.events import MISSING_FIELD, OUT_OF_RANGE, SHAPE_REASONS, WRONG_TYPE, DeadLetter, InvalidEvent
from rankflow.state.json_exact import exact_object, require_object
from rankflow.state.signatures import Signer, sign

__all__ = [
    "BAD_SIGNATURE",
    "REASONS", "ID_FIELDS", "INT_FIELDS", "FIELDS", "MAX_ID_CHARS", "MAX_POINTS", "MAX_TIME",
    "ScoreResult", "ScoreEvent", "validate_score", "check_score", "parse_score", "parse_score_records", "loads_json",
]

# Reason codes of checks 1 to 6. The first five are the shape checks of every flow
# (state.events.SHAPE_REASONS, defined once); checks 7 and 8 and conflicts are
# verdicts of the per-player rules (state.board_rules.Verdict).
BAD_SIGNATURE = "bad_signature"
REASONS = (*SHAPE_REASONS, BAD_SIGNATURE)

ID_FIELDS = ("game_id", "match_id", "player_id")
INT_FIELDS = ("points", "played_at", "received_at")
FIELDS = ID_FIELDS + INT_FIELDS
MAX_ID_CHARS = 64
MAX_POINTS = 10000
MAX_TIME = 253402300799999  # 9999-12-31T23:59:59.999Z in ms
_MAXIMA = {"points": MAX_POINTS, "played_at": MAX_TIME, "received_at": MAX_TIME}

# An integer literal longer than this is out of range whatever its digits; the
# standard library would refuse to convert one beyond 4300 digits at all.
_LONG_DIGITS = 40
_HUGE: int = 10**_LONG_DIGITS


class ScoreResult(NamedTuple):
    """One match result that passed checks 1 to 6, with where it came from.

    ``offset`` is its position in its source partition; ``raw`` is kept so that a
    verdict of the per-player rules (``too_old``, ``conflict``...) can still be
    dead-lettered with the original text. The hot path builds plain tuples in this
    field order (:data:`ScoreEvent`): cheaper to build and to pickle.
    """

    game_id: str
    match_id: str
    player_id: str
    points: int
    played_at: int
    received_at: int
    offset: int
    raw: bytes


PLAYER_ID = 2
"""The field of a :data:`ScoreEvent` the per-player stage is keyed by."""

ScoreEvent = tuple[str, str, str, int, int, int, int, bytes]
"""A :class:`ScoreResult`'s fields as a plain tuple, in the same order."""


def _parse_int(digits: str) -> int:
    """An integer literal as an int; one too long to matter stays an int, out of range."""
    if len(digits) <= _LONG_DIGITS:
        return int(digits)
    return -_HUGE if digits[0] == "-" else _HUGE


def loads_json(raw: bytes) -> Any:
    """Check 1: the JSON value of ``raw``, or :class:`InvalidEvent` ``invalid_json``.

    >>> loads_json(b'{"points": 1e400}')  # valid JSON beyond a double: orjson refuses, json reads it
    {'points': inf}
    >>> loads_json(b'{"points": NaN}')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: invalid_json: ...
    """
    return json_exact.loads_json(raw, _parse_int)


_TYPES = {f: "a string" for f in ID_FIELDS} | {f: "an integer" for f in INT_FIELDS}
_RANGES = {f: f"1 to {MAX_ID_CHARS} characters long" for f in ID_FIELDS} | {
    "points": f"0 to {MAX_POINTS}", "played_at": f"0 to {MAX_TIME}", "received_at": f"0 to {MAX_TIME}"}


def _check_fields(obj: dict[str, Any]) -> None:
    """Checks 3, 4, 5 in turn, each over all six fields before the next starts."""
    missing = [f for f in FIELDS if f not in obj]
    if missing:
        raise InvalidEvent(MISSING_FIELD, "; ".join(f"{f} is missing" for f in missing))
    wrong = [f for f in ID_FIELDS if type(obj[f]) is not str]
    wrong += [f for f in INT_FIELDS if type(obj[f]) is not int]  # bool and float are not int
    if wrong:
        raise InvalidEvent(WRONG_TYPE, "; ".join(f"{f} must be {_TYPES[f]}" for f in wrong))
    bad = [f for f in ID_FIELDS if not 0 < len(obj[f]) <= MAX_ID_CHARS]
    bad += [f for f in INT_FIELDS if not 0 <= obj[f] <= _MAXIMA[f]]
    if bad:
        raise InvalidEvent(OUT_OF_RANGE, "; ".join(f"{f} must be {_RANGES[f]}" for f in bad))


def _signed(key: bytes, sig: Any, game: str, match: str, player: str, points: int, played_at: int) -> bool:
    """Check 6: ``sig`` is exactly the expected lowercase hex, compared in constant time."""
    if type(sig) is not str:
        return False
    return hmac.compare_digest(sig.encode("utf-8"), sign(key, game, match, player, points, played_at).encode())


_SIG_DETAILS = ("sig is missing", "sig must be a string",
                "sig is not the lowercase hex HMAC-SHA256 of this result under the signing key")


def validate_score(obj: Any, raw: bytes, key: bytes | None) -> tuple[str, str, str, int, int, int]:
    """Checks 2 to 6 on a parsed event: ``(game_id, match_id, player_id, points, played_at, received_at)``.

    ``raw`` is only read again when ``obj`` holds a float where an integer belongs
    (orjson's reading of an integer beyond 64 bits). Other fields are ignored, and so
    is ``sig`` when ``key`` is None.

    >>> ok = {"game_id": "g1", "match_id": "m1", "player_id": "🎮", "points": 0, "played_at": 0, "received_at": 5}
    >>> validate_score(ok, b"", None)
    ('g1', 'm1', '🎮', 0, 0, 5)
    >>> validate_score({**ok, "points": None, "played_at": -1}, b"", None)
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: wrong_type: points must be an integer
    >>> validate_score(ok, b"", b"k" * 32)
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: bad_signature: sig is missing
    """
    obj = require_object(obj)
    if raw and any(type(obj.get(f)) is float for f in INT_FIELDS):
        obj = exact_object(obj, raw, _parse_int)
    _check_fields(obj)
    game, match, player = obj["game_id"], obj["match_id"], obj["player_id"]
    points, played_at, received_at = obj["points"], obj["played_at"], obj["received_at"]
    if key is not None and not _signed(key, obj.get("sig"), game, match, player, points, played_at):
        raise InvalidEvent(BAD_SIGNATURE, _SIG_DETAILS[("sig" in obj) + (type(obj.get("sig")) is str)])
    return game, match, player, points, played_at, received_at


def check_score(raw: bytes, key: bytes | None) -> tuple[str, str, str, int, int, int]:
    """Checks 1 to 6 of one record (:func:`validate_score`), or :class:`InvalidEvent`: the
    whole check of the flow, which ``POST /matches/{id}/result`` applies to each result
    as it will reach the flow."""
    return validate_score(loads_json(raw), raw, key)


def parse_score(raw: bytes, partition: str, offset: int, epoch: int,
                key: bytes | None) -> ScoreResult | DeadLetter:
    """One input record as a result, or as a dead letter saying which check failed first.

    >>> parse_score(b"[1]", "scores.jsonl", 3, 1, None)[:4]
    ('not_an_object', 'expected a JSON object, got an array', 'scores.jsonl', 3)
    """
    try:
        fields = check_score(raw, key)
    except InvalidEvent as exc:
        return DeadLetter(exc.reason, exc.detail, partition, offset, raw, epoch)
    return ScoreResult(*fields, offset, raw)


@functools.lru_cache(maxsize=4)
def _signer(key: bytes) -> Signer:
    return Signer(key)


def parse_score_records(
    records: list[bytes], offsets: range | list[int], partition: str, epoch: int, key: bytes | None
) -> tuple[list[ScoreEvent], list[tuple[str, DeadLetter]]]:
    """Parse a batch: the valid :data:`ScoreEvent`\\ s and ``(partition, dead letter)`` pairs.

    The hot path of the score flow. A common valid line takes the inlined checks
    below; anything they do not accept outright goes through :func:`parse_score`,
    which applies every rule and says why a line is invalid. So the fast path may
    only ever accept what :func:`validate_score` accepts: orjson has already refused
    what is not JSON, and a float (perhaps a big integer) is never accepted here.

    >>> line = b'{"game_id":"g1","match_id":"m1","player_id":"ana","points":5,"played_at":1,"received_at":2}'
    >>> events, dead = parse_score_records([line, b"{"], range(7, 9), "p0", 1, None)
    >>> [event[:7] for event in events], events[0][7] is line
    ([('g1', 'm1', 'ana', 5, 1, 2, 7)], True)
    >>> [(partition, d.reason, d.offset) for partition, d in dead]
    [('p0', 'invalid_json', 8)]
    """
    events: list[ScoreEvent] = []
    dead: list[tuple[str, DeadLetter]] = []
    loads, most, top, end, same = orjson.loads, MAX_ID_CHARS, MAX_POINTS, MAX_TIME, hmac.compare_digest
    digest = _signer(key).hex if key is not None else None
    for offset, raw in zip(offsets, records):
        try:
            obj = loads(raw)
            g, m, p = obj["game_id"], obj["match_id"], obj["player_id"]
            n, t, r = obj["points"], obj["played_at"], obj["received_at"]
            if (type(g) is str and type(m) is str and type(p) is str
                    and 0 < len(g) <= most and 0 < len(m) <= most and 0 < len(p) <= most
                    and type(n) is int and 0 <= n <= top and type(t) is int and 0 <= t <= end
                    and type(r) is int and 0 <= r <= end):
                if digest is None:  # no key
                    events.append((g, m, p, n, t, r, offset, raw))
                    continue
                s = obj.get("sig")
                if type(s) is str and same(s, digest(g, m, p, n, t)):  # a non-ASCII s raises: the full rules say why
                    events.append((g, m, p, n, t, r, offset, raw))
                    continue
        except Exception:  # noqa: BLE001 - not JSON, not an object, a field missing: the full rules decide
            pass
        parsed = parse_score(raw, partition, offset, epoch, key)
        if isinstance(parsed, ScoreResult):
            events.append((*parsed,))
        else:
            dead.append((partition, parsed))
    return events, dead
