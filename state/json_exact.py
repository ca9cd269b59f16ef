"""Strict JSON (RFC 8259) with exact integers: orjson first, the standard library when it must.

Every event flow reads its input with these. orjson is fast and strict (no ``NaN``, no
lone surrogate escape, UTF-8 only) but stops at 64-bit integers: it reads a bigger
integer as a float, or fails on one beyond a double. JSON has no such limit, so
whatever orjson does not take as is, the standard library's ``json`` decides, with the
RFC 8259 rules it lacks added back (see :func:`loads_exact`).

How an integer literal becomes a Python value is the caller's choice (``parse_int``):
the score flow only range-checks its integers, so it maps a very long literal to a
sentinel beyond every range (cheap, whatever its length); the activity flow needs the
exact value of any size (``ts // bucket_ms``), which :func:`exact_int` gives, even past
the interpreter's 4300-digit limit on ``int(str)``.

A failed check raises :class:`~rankflow.state.events.InvalidEvent` ``invalid_json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import orjson

from rankflow.state.events import INVALID_JSON, NOT_AN_OBJECT, InvalidEvent
from rankflow.state.json_spans import nesting_depth

__all__ = ["exact_int", "reject_constant", "lone_surrogate", "loads_exact", "loads_json", "exact_object",
           "json_kind", "require_object"]

ParseInt = Callable[[str], int]

# Below the smallest limit ``sys.set_int_max_str_digits`` accepts (640), so a chunk always
# converts, whatever the process (or PYTHONINTMAXSTRDIGITS) set the limit to.
_CHUNK_DIGITS = 600


def _digits_to_int(digits: str) -> int:
    """Decimal digits as an int by halves: O(n^1.6) with Karatsuba, where ``int(str)`` is O(n^2)."""
    if len(digits) <= _CHUNK_DIGITS:
        return int(digits)
    low = len(digits) // 2
    scale: int = 10**low
    return _digits_to_int(digits[:-low]) * scale + _digits_to_int(digits[-low:])


def exact_int(literal: str) -> int:
    """A JSON integer literal (``-?(0|[1-9][0-9]*)``) as the exact int, of any length.

    ``int()`` refuses more than 4300 digits (a guard against its quadratic time) and the
    limit is process-wide (``sys.set_int_max_str_digits``), so a long literal is converted
    in chunks instead, each short enough for any limit. A million digits (a Kafka message
    at its default size limit) take about half a second, where ``int`` would take a minute
    without the limit.

    >>> exact_int("-0"), exact_int("18446744073709551616")
    (0, 18446744073709551616)
    >>> exact_int("1" + "0" * 5000) == 10**5000
    True
    """
    if len(literal) <= _CHUNK_DIGITS:
        return int(literal)
    if literal[0] == "-":
        return -_digits_to_int(literal[1:])
    return _digits_to_int(literal)


def reject_constant(name: str) -> Any:
    """``parse_constant`` for ``json``: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON."""
    raise ValueError(f"{name} is not JSON")


def lone_surrogate(obj: Any) -> bool:
    """Whether a string or key anywhere in ``obj`` holds a surrogate of no pair.

    >>> lone_surrogate({"a": ["\\ud800"]}), lone_surrogate({"a": "\\U0001d11e"})
    (True, False)
    """
    stack = [obj]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif type(item) is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


MAX_DEPTH = 1024
"""How deep containers may nest: orjson's limit, so both readers agree on every text."""


def _stack_depth() -> int:
    frame: FrameType | None = sys._getframe()
    depth = 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def _room_to_nest(levels: int) -> None:
    """Make sure the standard library's ``json`` can nest ``levels`` deep from here: its
    C scanner counts each level against the interpreter's recursion limit, from the
    caller's depth. The limit is only ever raised (lowering it again could cut another
    thread's parse short); a few hundred frames more are harmless."""
    needed = _stack_depth() + levels + 100
    if needed > sys.getrecursionlimit():
        sys.setrecursionlimit(needed)


def loads_exact(raw: bytes, orjson_error: str, parse_int: ParseInt = exact_int) -> Any:
    """Read what orjson refused, or re-read what it rounded: the standard library decides.

    ``json`` keeps integers exact but is laxer than RFC 8259 in three ways, each
    closed here: it guesses UTF-16/32 from bytes (so the text is decoded as UTF-8
    first), accepts ``NaN`` and ``Infinity`` (refused by :func:`reject_constant`) and
    keeps lone surrogate escapes (looked for afterwards). Nesting deeper than
    :data:`MAX_DEPTH` (orjson's own limit) is refused, as RFC 8259 section 9 lets a
    parser do, and nothing shallower is: the verdict never depends on how deep the
    caller's stack is (the flow's, or the HTTP service's, ``api.ingest``).
    ``orjson_error`` is the detail when ``json`` refuses the text too.

    >>> loads_exact(b'[18446744073709551616, 1.5]', "")
    [18446744073709551616, 1.5]
    >>> loads_exact(b'["\\\\udfae"]', "")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: invalid_json: a string holds an unpaired surrogate escape
    """
    if nesting_depth(raw) > MAX_DEPTH:
        raise InvalidEvent(INVALID_JSON, orjson_error or f"nested deeper than {MAX_DEPTH}")
    _room_to_nest(MAX_DEPTH)
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=reject_constant, parse_int=parse_int)
    except UnicodeDecodeError as exc:
        raise InvalidEvent(INVALID_JSON, f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except (ValueError, RecursionError):
        raise InvalidEvent(INVALID_JSON, orjson_error or "not JSON") from None
    if lone_surrogate(obj):
        raise InvalidEvent(INVALID_JSON, "a string holds an unpaired surrogate escape")
    return obj


def loads_json(raw: bytes, parse_int: ParseInt = exact_int) -> Any:
    """The JSON value of ``raw``, or :class:`InvalidEvent` ``invalid_json``.

    A big integer orjson could read only as a float stays a float here (cheap, and
    what the hot paths expect); :func:`exact_object` re-reads the line when such a
    float stands where an integer belongs.

    >>> loads_json(b'{"ts": 1e400}')  # valid JSON beyond a double: orjson refuses, json reads it
    {'ts': inf}
    >>> loads_json(b'{"ts": ' + b"9" * 400 + b'}')["ts"] == 10**400 - 1
    True
    >>> loads_json(b'')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: invalid_json: ...
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return loads_exact(raw, str(exc), parse_int)


def exact_object(obj: dict[str, Any], raw: bytes, parse_int: ParseInt = exact_int) -> dict[str, Any]:
    """Re-read a line where a float stands for an integer: orjson's reading of one beyond 64 bits.

    Rare path only. ``10.0`` stays a float (not an integer); ``18446744073709551616``
    becomes the int it is. ``obj`` is returned as it is when ``raw`` is not one object.

    >>> exact_object({"ts": 1.8446744073709552e19}, b'{"ts": 18446744073709551616}')
    {'ts': 18446744073709551616}
    """
    try:
        exact = loads_exact(raw, "", parse_int)
    except InvalidEvent:
        return obj
    return exact if type(exact) is dict else obj


_KINDS: dict[type, str] = {str: "a string", list: "an array", dict: "an object"}


def json_kind(obj: Any) -> str:
    """What a parsed JSON value is, for a dead letter's detail.

    >>> [json_kind(v) for v in (None, True, "x", [1], {}, 1.5)]
    ['null', 'a boolean', 'a string', 'an array', 'an object', 'a number']
    """
    if obj is None:
        return "null"
    if type(obj) is bool:
        return "a boolean"
    return _KINDS.get(type(obj), "a number")


def require_object(obj: Any) -> dict[str, Any]:
    """``obj`` if it is a JSON object, else :class:`InvalidEvent` ``not_an_object`` naming what it is:
    the second check of the score and activity flows, worded the same in both.

    >>> require_object([1])
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: not_an_object: expected a JSON object, got an array
    """
    if type(obj) is not dict:
        raise InvalidEvent(NOT_AN_OBJECT, f"expected a JSON object, got {json_kind(obj)}")
    return obj
