"""Match results and their stateless validation (docs/semantics/boards.md section 1, checks 1 to 6).

Every score event passes through :func:`parse_score_records` once. One that fails a
check changes nothing and becomes a :class:`~rankflow.state.events.DeadLetter` naming
the first failed check; it never raises out of the flow. Checks 7 and 8 need the
player's newest receipt, so they belong to the per-player rules
(:mod:`rankflow.state.board_rules`), as do duplicates and conflicts.

The checks themselves are the Rust kernel's (``native/src/score.rs``, the module
``rankflow._native``): it reads each record's raw bytes once, strictly (RFC 8259: UTF-8
only, no ``NaN``, no unpaired surrogate escape, integers of any length, nesting at most
1024 deep), checks the six fields and the signature, and hands back a batch's results
as tuples and its refusals as ``(index, reason, detail)``. This module is its Python
face: the names, the tuples' shape, the dead letters.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from rankflow import _native
from rankflow.state import json_exact
from rankflow.state.events import SHAPE_REASONS, DeadLetter, InvalidEvent

__all__ = [
    "BAD_SIGNATURE",
    "REASONS", "ID_FIELDS", "INT_FIELDS", "FIELDS", "MAX_ID_CHARS", "MAX_POINTS", "MAX_TIME",
    "ScoreResult", "ScoreEvent", "GroupedScoreEvent", "check_score", "parse_score", "parse_score_records", "loads_json",
]

# Reason codes of checks 1 to 6. The first five are the shape checks of every flow
# (state.events.SHAPE_REASONS, defined once); checks 7 and 8 and conflicts are
# verdicts of the per-player rules (state.board_rules.Verdict).
BAD_SIGNATURE = "bad_signature"
REASONS = (*SHAPE_REASONS, BAD_SIGNATURE)

ID_FIELDS = ("game_id", "match_id", "player_id")
INT_FIELDS = ("points", "played_at", "received_at")
FIELDS = ID_FIELDS + INT_FIELDS
# The limits are the kernel's (native/src/score.rs): one definition, read here by the API's schemas.
MAX_ID_CHARS: int = _native.MAX_ID_CHARS
MAX_POINTS: int = _native.MAX_POINTS
MAX_TIME: int = _native.MAX_TIME  # 9999-12-31T23:59:59.999Z in ms

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

GroupedScoreEvent = tuple[str, str, str, int, int, int, int, bytes, str | None]
"""A :data:`ScoreEvent` of a run that groups its boards (``--group-by FIELD``): a ninth field, the
game key of the result's group boards, ``GAME@FIELD=VALUE`` (None: the result has no group)."""


def _parse_int(digits: str) -> int:
    """An integer literal as an int; one too long to matter stays an int, out of range."""
    if len(digits) <= _LONG_DIGITS:
        return int(digits)
    return -_HUGE if digits[0] == "-" else _HUGE


def loads_json(raw: bytes) -> Any:
    """The JSON value of ``raw``, or :class:`InvalidEvent` ``invalid_json``: for the HTTP
    ingest, which looks into a result's object before :func:`check_score` (its
    ``match_id``, where the stamps go). It accepts exactly the texts the kernel's check 1
    accepts (tests/boards/test_score_events.py holds both to the model).

    >>> loads_json(b'{"points": 1e400}')  # valid JSON beyond a double: orjson refuses, json reads it
    {'points': inf}
    >>> loads_json(b'{"points": NaN}')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: invalid_json: ...
    """
    return json_exact.loads_json(raw, _parse_int)


@functools.lru_cache(maxsize=4)
def _checker(key: bytes | None, group: str | None = None) -> _native.ScoreChecker:
    return _native.ScoreChecker(key, group)


def check_score(raw: bytes, key: bytes | None) -> tuple[str, str, str, int, int, int]:
    """Checks 1 to 6 of one record: ``(game_id, match_id, player_id, points, played_at,
    received_at)``, or :class:`InvalidEvent` naming the first failed check. The whole
    check of the flow, which ``POST /matches/{id}/result`` applies to each result as it
    will reach the flow. ``sig`` is ignored when ``key`` is None.

    >>> check_score(b'{"game_id": "g1", "match_id": "m1", "player_id": "\\ud83c\\udfae", "points": 0,'
    ...             b' "played_at": 0, "received_at": 5}', None)
    ('g1', 'm1', '🎮', 0, 0, 5)
    >>> check_score(b'{"game_id": "g1", "points": null}', None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: missing_field: match_id is missing; player_id is missing; ...
    """
    checked = _checker(key).check(raw)
    if len(checked) == 2:
        raise InvalidEvent(*checked)
    return checked  # six fields: the kernel's other answer (mypy narrows by length)


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


def parse_score_records(
    records: list[bytes], offsets: range | list[int], partition: str, epoch: int, key: bytes | None,
    group: str | None = None,
) -> tuple[list[ScoreEvent], list[tuple[str, DeadLetter]]]:
    """Parse a batch: the valid :data:`ScoreEvent`\\ s and ``(partition, dead letter)`` pairs.

    The hot path of the score flow: one call into the kernel per batch. ``group``: the field a
    run groups its boards by (``--group-by``, docs/semantics/boards.md 10); each event then has a
    ninth field, its group's game key ``GAME@FIELD=VALUE`` (:data:`GroupedScoreEvent`), or None.

    >>> line = b'{"game_id":"g1","match_id":"m1","player_id":"ana","points":5,"played_at":1,"received_at":2}'
    >>> events, dead = parse_score_records([line, b"{"], range(7, 9), "p0", 1, None)
    >>> [event[:7] for event in events], events[0][7] is line
    ([('g1', 'm1', 'ana', 5, 1, 2, 7)], True)
    >>> [(partition, d.reason, d.offset) for partition, d in dead]
    [('p0', 'invalid_json', 8)]
    """
    checker = _checker(key, group)
    if type(offsets) is range and offsets.step == 1:
        events, refused = checker.parse(records, offsets.start)
    else:
        events, refused = checker.parse(records, 0, list(offsets))
    dead = [(partition, DeadLetter(reason, detail, partition, offsets[i], records[i], epoch))
            for i, reason, detail in refused]
    return events, dead
