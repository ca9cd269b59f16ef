"""Playback events and their validation (docs/semantics/listeners.md section 1).

Everything that enters the flow passes through :func:`parse_event` once. An event
that fails it changes nothing and becomes a :class:`DeadLetter`; it never raises out
of the flow. The reason codes are stable strings so that operators can alert on them
and tests can count them.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import orjson

from rankflow.state.json_spans import member_value

START = "START"
STOP = "STOP"
HEARTBEAT = "HEARTBEAT"
TIMEOUT = "TIMEOUT"
"""Written by the sweeper of docs/semantics/listeners.md section 6, not by players; it also carries ``idle_ms``."""
PLAYER_TYPES = frozenset((START, STOP, HEARTBEAT))
"""The types whose events have no field beyond section 1's common ones: the only ones
the fast path of :func:`parse_records` accepts by itself."""
EVENT_TYPES = PLAYER_TYPES | {TIMEOUT}

MAX_ID_CHARS = 256
ID_FIELDS = ("user_id", "playback_id", "song_id")
INT_FIELDS = ("version", "ts")
IDLE_MS = "idle_ms"
"""The timeout a ``TIMEOUT`` was fired with: required on ``TIMEOUT`` only (an integer >= 1,
not a boolean), ignored like any other extra field on the other types."""

# Reason codes of invalid events. "shape" reasons come from this module, "conflict"
# reasons from the counting rules (state.rules).
INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
OUT_OF_RANGE = "out_of_range"
UNKNOWN_TYPE = "unknown_type"
SHAPE_REASONS = (INVALID_JSON, NOT_AN_OBJECT, MISSING_FIELD, WRONG_TYPE, OUT_OF_RANGE)
"""The shape checks every product's events start with, in the order they are made: each
product's own ``REASONS`` adds its checks after these."""

_INTEGER_LITERAL = re.compile(rb"-?(?:0|[1-9][0-9]*)")


class PlaybackEvent(NamedTuple):
    """One validated event, with where it came from.

    ``offset`` is its position in its source partition; ``raw`` is kept so that a
    conflict found later can still be dead-lettered with the original text. The
    hot path builds plain tuples in this field order (:data:`Event`): they are
    cheaper to build and to pickle, and unpack the same way.

    ``idle_ms`` is a ``TIMEOUT``'s (docs/semantics/listeners.md 6) and 0 on every other type. It
    comes last, with a default, so that the positions of the other fields (``ts`` at
    5, read by the recent plays' watermark) stay where they were.
    """

    user_id: str
    playback_id: str
    song_id: str
    type: str
    version: int
    ts: int
    offset: int
    raw: bytes
    idle_ms: int = 0


Event = tuple[str, str, str, str, int, int, int, bytes, int]
"""A :class:`PlaybackEvent`'s fields as a plain tuple, in the same order."""


class DeadLetter(NamedTuple):
    """An invalid event: why, where, and what it was."""

    reason: str
    detail: str
    partition: str
    offset: int
    raw: bytes
    epoch: int

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "reason": self.reason,
                "detail": self.detail,
                "position": {"partition": self.partition, "offset": self.offset},
                "raw": self.raw.decode("utf-8", "backslashreplace"),
            }
        )


class InvalidEvent(Exception):
    """Raised by :func:`validate` with a stable reason code and a readable detail."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(INVALID_JSON, str(exc)) from None


def _exact_integer(raw: bytes, field: str) -> Any:
    """Re-read a field that orjson turned into a float.

    orjson reads integers beyond 64 bits as floats; JSON itself has no such limit, so
    the field's literal as written decides: an integer literal is that int, any other
    (``1e3``, ``10.0``) stays the float. Only the field is read, never the whole text
    again, so a deep extra field cannot exhaust the interpreter's recursion limit (the
    standard library's ``json`` would raise, whatever the caller's stack). Rare path only.
    """
    literal = member_value(raw, field)
    if literal is None or not _INTEGER_LITERAL.fullmatch(literal):
        return float(literal) if literal is not None else None
    return int(literal)


def _integer(obj: dict[str, Any], raw: bytes, field: str, least: int) -> int:
    """A required integer field, not a boolean, at least ``least``."""
    if field not in obj:
        raise InvalidEvent(MISSING_FIELD, f"{field} is missing")
    value = obj[field]
    if type(value) is float:
        value = _exact_integer(raw, field)
    if type(value) is not int:  # also rejects bool, a subclass of int
        raise InvalidEvent(WRONG_TYPE, f"{field} must be an integer")
    if value < least:
        raise InvalidEvent(OUT_OF_RANGE, f"{field} must be >= {least}")
    return value


def validate(obj: Any, raw: bytes) -> tuple[str, str, str, str, int, int, int]:
    """Check the fields docs/semantics/listeners.md section 1 requires; other fields are ignored.

    ``(user_id, playback_id, song_id, type, version, ts, idle_ms)``: ``idle_ms`` is
    checked and returned on a ``TIMEOUT`` only, 0 on the other types (where a field of
    that name is one more ignored field)."""
    if not isinstance(obj, dict):
        raise InvalidEvent(NOT_AN_OBJECT, f"expected a JSON object, got {type(obj).__name__}")
    ids = []
    for field in ID_FIELDS:
        value = obj.get(field)
        if value is None and field not in obj:
            raise InvalidEvent(MISSING_FIELD, f"{field} is missing")
        if type(value) is not str:
            raise InvalidEvent(WRONG_TYPE, f"{field} must be a string")
        if not 0 < len(value) <= MAX_ID_CHARS:
            raise InvalidEvent(OUT_OF_RANGE, f"{field} must have 1 to {MAX_ID_CHARS} characters")
        ids.append(value)
    etype = obj.get("type")
    if etype is None and "type" not in obj:
        raise InvalidEvent(MISSING_FIELD, "type is missing")
    if type(etype) is not str:
        raise InvalidEvent(WRONG_TYPE, "type must be a string")
    if etype not in EVENT_TYPES:
        raise InvalidEvent(UNKNOWN_TYPE, f"type must be START, STOP, HEARTBEAT or TIMEOUT, got {etype[:40]!r}")
    version, ts = (_integer(obj, raw, field, 0) for field in INT_FIELDS)
    idle_ms = _integer(obj, raw, IDLE_MS, 1) if etype == TIMEOUT else 0
    return ids[0], ids[1], ids[2], etype, version, ts, idle_ms


def check_event(raw: bytes) -> tuple[str, str, str, str, int, int, int]:
    """One record's fields (:func:`validate`), or :class:`InvalidEvent`: the whole check
    of the flow, which ``POST /events`` applies to each event as it will reach the flow."""
    return validate(_loads(raw), raw)


def parse_event(
    raw: bytes, partition: str, offset: int, epoch: int
) -> PlaybackEvent | DeadLetter:
    """Turn one input record into an event, or into a dead letter saying why not."""
    try:
        user, playback, song, etype, version, ts, idle_ms = check_event(raw)
    except InvalidEvent as exc:
        return DeadLetter(exc.reason, exc.detail, partition, offset, raw, epoch)
    return PlaybackEvent(user, playback, song, etype, version, ts, offset, raw, idle_ms)


def parse_records(
    records: list[bytes], offsets: range | list[int], partition: str, epoch: int
) -> tuple[list[Event], list[tuple[str, DeadLetter]]]:
    """Parse a batch: the valid :data:`Event`\\ s, and ``(partition, dead letter)`` pairs.

    The hot path of the whole flow. A valid event takes the inlined checks below;
    anything they do not accept outright goes through :func:`parse_event`, which
    applies the same rules in full and says why an event is invalid. So the fast
    path may only ever accept what :func:`validate` accepts. It accepts the players'
    types only (:data:`PLAYER_TYPES`): a ``TIMEOUT`` (one per idle playback, a small
    share of a log) takes the full path, which checks its ``idle_ms``, so the players'
    events pay nothing for it but one more field in their tuples.
    """
    events: list[Event] = []
    dead: list[tuple[str, DeadLetter]] = []
    loads, types, most = orjson.loads, PLAYER_TYPES, MAX_ID_CHARS
    for offset, raw in zip(offsets, records):
        try:
            obj = loads(raw)
            u, p, s, t = obj["user_id"], obj["playback_id"], obj["song_id"], obj["type"]
            v, ts = obj["version"], obj["ts"]
            if (type(u) is str and type(p) is str and type(s) is str
                    and 0 < len(u) <= most and 0 < len(p) <= most and 0 < len(s) <= most
                    and t in types and type(v) is int and v >= 0 and type(ts) is int and ts >= 0):
                events.append((u, p, s, t, v, ts, offset, raw, 0))
                continue
        except Exception:  # noqa: BLE001 - not JSON, not an object, a field missing: the full rules decide
            pass
        parsed = parse_event(raw, partition, offset, epoch)
        if isinstance(parsed, PlaybackEvent):
            events.append(parsed)
        else:
            dead.append((partition, parsed))
    return events, dead
