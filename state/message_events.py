"""Activity (message) events and their stateless validation (docs/semantics/windows.md section 1, checks 1 to 3).

Every message event passes through :func:`parse_message_records` once. One that fails a
check changes nothing and becomes a :class:`~rankflow.state.events.DeadLetter` naming the
first failed check; it never raises out of the flow. Check 4 (``expired``) needs the
watermark, so it belongs to the window rules, which dead-letter with :data:`EXPIRED`.

JSON is read as the score flow reads it (:mod:`rankflow.state.json_exact`): orjson,
strict and fast, and the standard library for what orjson refuses or rounds. Unlike a
score, ``ts`` has no upper bound: ``10**30`` is a valid event time (far in the future:
it moves the watermark there, docs/semantics/windows.md section 2), and the window needs its exact
value (``ts // bucket_ms``). So ``ts`` is always the exact int, however long its
literal; orjson reads one beyond 64 bits as a float, which sends the line down the
exact path.

An event travels as a plain tuple (:data:`MessageEvent`), cheaper to build and to pickle
than an object; :data:`WORKSPACE` ... :data:`RAW` name its fields' positions.
"""

from __future__ import annotations

from typing import Any

import orjson

from rankflow.state.events import MISSING_FIELD, OUT_OF_RANGE, SHAPE_REASONS, WRONG_TYPE, DeadLetter, InvalidEvent
from rankflow.state.json_exact import exact_object, loads_json, require_object

__all__ = [
    "EXPIRED", "REASONS",
    "ID_FIELDS", "FIELDS", "MAX_ID_CHARS", "MessageEvent", "WORKSPACE", "CHANNEL", "USER", "TS", "OFFSET", "RAW",
    "validate_message", "parse_message", "parse_message_records",
]

EXPIRED = "expired"
"""Check 4: valid by shape but before the window, never to count (decided by the window rules)."""

REASONS = (*SHAPE_REASONS, EXPIRED)
"""The six reason codes of the activity flow's dead letters, in the order of the checks."""

ID_FIELDS = ("workspace_id", "channel_id", "user_id")
FIELDS = (*ID_FIELDS, "ts")
MAX_ID_CHARS = 64

MessageEvent = tuple[str, str, str, int, int, bytes]
"""A valid event: ``(workspace_id, channel_id, user_id, ts, offset, raw)``.

``offset`` is its position in its source partition (the 0-based line of a JSON Lines
file); ``raw`` is kept so that the window rules can still dead-letter it (``expired``)
with the original text.
"""

WORKSPACE, CHANNEL, USER, TS, OFFSET, RAW = range(6)
"""The positions of a :data:`MessageEvent`'s fields."""

_RANGES = {f: f"1 to {MAX_ID_CHARS} characters long" for f in ID_FIELDS} | {"ts": ">= 0"}


def _check_field(obj: dict[str, Any], field: str) -> None:
    """Check 3 on one field: present, then of its type, then in its range."""
    if field not in obj:
        raise InvalidEvent(MISSING_FIELD, f"{field} is missing")
    value = obj[field]
    if field == "ts":
        if type(value) is not int:  # bool is a subclass of int, not int; 1.0 is a float
            raise InvalidEvent(WRONG_TYPE, "ts must be an integer")
        if value < 0:
            raise InvalidEvent(OUT_OF_RANGE, f"ts must be {_RANGES['ts']}")
    elif type(value) is not str:
        raise InvalidEvent(WRONG_TYPE, f"{field} must be a string")
    elif not 0 < len(value) <= MAX_ID_CHARS:
        raise InvalidEvent(OUT_OF_RANGE, f"{field} must be {_RANGES[field]}")


def _check_fields(obj: dict[str, Any]) -> None:
    """Check 3: field by field in the table's order, each field completely before the next.

    docs/semantics/windows.md section 1 says so word for word, so the first field that fails names the
    reason: ``{"workspace_id": "", "ts": true}`` is ``out_of_range`` (``workspace_id``
    comes first), and ``{"channel_id": 5}`` with ``user_id`` and ``ts`` absent is
    ``wrong_type``. The reason never depends on the order of the fields in the line.
    """
    for field in FIELDS:
        _check_field(obj, field)


def validate_message(obj: Any, raw: bytes) -> tuple[str, str, str, int]:
    """Checks 2 and 3 on a parsed event: ``(workspace_id, channel_id, user_id, ts)``.

    ``raw`` is only read again when ``ts`` is a float (orjson's reading of an integer
    beyond 64 bits), so that ``ts`` is the exact int or, for ``1.0`` or ``1e3``, stays
    a float and is ``wrong_type``. Lengths count code points (``len``): ``"🎉"`` is one.
    Other fields are ignored.

    >>> ok = {"workspace_id": "w1", "channel_id": "general", "user_id": "🎉", "ts": 0, "x": None}
    >>> validate_message(ok, b"")
    ('w1', 'general', '🎉', 0)
    >>> validate_message({**ok, "ts": True, "channel_id": ""}, b"")  # channel_id comes before ts
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: out_of_range: channel_id must be 1 to 64 characters long
    >>> raw = b'{"workspace_id": "w", "channel_id": "c", "user_id": "u", "ts": 100000000000000000000}'
    >>> validate_message(orjson.loads(raw), raw)  # orjson read ts as 1e20: raw says exactly what it is
    ('w', 'c', 'u', 100000000000000000000)
    >>> validate_message([1], b"[1]")
    Traceback (most recent call last):
    rankflow.state.events.InvalidEvent: not_an_object: expected a JSON object, got an array
    """
    obj = require_object(obj)
    if raw and type(obj.get("ts")) is float:
        obj = exact_object(obj, raw)
    _check_fields(obj)
    return obj["workspace_id"], obj["channel_id"], obj["user_id"], obj["ts"]


def parse_message(raw: bytes, partition: str, offset: int, epoch: int) -> MessageEvent | DeadLetter:
    """One input record as a :data:`MessageEvent`, or as a dead letter saying which check failed first.

    A dead letter is a (named) tuple too: tell the two apart with
    ``isinstance(result, DeadLetter)``.

    >>> parse_message(b'{"workspace_id":"w","channel_id":"c","user_id":"u","ts":5}', "m.jsonl", 0, 1)
    ('w', 'c', 'u', 5, 0, b'{"workspace_id":"w","channel_id":"c","user_id":"u","ts":5}')
    >>> parse_message(b"", "m.jsonl", 3, 1)[:4]  # an empty line is an event too: an invalid one
    ('invalid_json', 'Input is a zero-length, empty document: line 1 column 1 (char 0)', 'm.jsonl', 3)
    """
    try:
        ws, ch, user, ts = validate_message(loads_json(raw), raw)
    except InvalidEvent as exc:
        return DeadLetter(exc.reason, exc.detail, partition, offset, raw, epoch)
    return ws, ch, user, ts, offset, raw


def parse_message_records(
    records: list[bytes], offsets: range | list[int], partition: str, epoch: int
) -> tuple[list[MessageEvent], list[tuple[str, DeadLetter]]]:
    """Parse a batch: the valid :data:`MessageEvent`\\ s and ``(partition, dead letter)`` pairs.

    The hot path of the activity flow. A common valid line takes the inlined checks
    below; anything they do not accept outright goes through :func:`parse_message`,
    which applies every rule and says why a line is invalid. So the fast path may
    only ever accept what :func:`validate_message` accepts: orjson has already refused
    what is not JSON, and a float ``ts`` (perhaps an integer beyond 64 bits) is never
    accepted here.

    >>> line = b'{"workspace_id":"w1","channel_id":"c1","user_id":"ana","ts":60000}'
    >>> events, dead = parse_message_records([line, b"[]", b'{"ts": 1}'], range(7, 10), "p0", 1)
    >>> [event[:5] for event in events], events[0][RAW] is line
    ([('w1', 'c1', 'ana', 60000, 7)], True)
    >>> [(partition, d.reason, d.offset) for partition, d in dead]
    [('p0', 'not_an_object', 8), ('p0', 'missing_field', 9)]
    """
    events: list[MessageEvent] = []
    dead: list[tuple[str, DeadLetter]] = []
    loads, most = orjson.loads, MAX_ID_CHARS
    for offset, raw in zip(offsets, records):
        try:
            obj = loads(raw)
            w, c, u, t = obj["workspace_id"], obj["channel_id"], obj["user_id"], obj["ts"]
            if (type(w) is str and type(c) is str and type(u) is str
                    and 0 < len(w) <= most and 0 < len(c) <= most and 0 < len(u) <= most
                    and type(t) is int and t >= 0):
                events.append((w, c, u, t, offset, raw))
                continue
        except Exception:  # noqa: BLE001 - not JSON, not an object, a field missing: the full rules decide
            pass
        parsed = parse_message(raw, partition, offset, epoch)
        if isinstance(parsed, DeadLetter):
            dead.append((partition, parsed))
        else:
            events.append(parsed)
    return events, dead
