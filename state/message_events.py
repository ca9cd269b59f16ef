"""Activity (message) events and their stateless validation (docs/semantics/windows.md section 1, checks 1 to 3).

Every message event passes through the kernel's checks once (``native/src/messages.rs``):
:func:`parse_message_records` for a batch, :func:`parse_message` for one line; the
activity flow's parse step also routes the batch there (``operators.window_counter``).
One that fails a check changes nothing and becomes a
:class:`~rankflow.state.events.DeadLetter` naming the first failed check; it never raises
out of the flow. Check 4 (``expired``) needs the watermark, so it belongs to the window
rules, which dead-letter with :data:`EXPIRED`.

JSON is read by the kernel as the score flow's checks read it (docs/design.md, "The native
kernel"): strict, UTF-8, no lone surrogate escape where it survives into a value. Unlike a
score, ``ts`` has no upper bound: ``10**30`` is a valid event time (far in the future:
it moves the watermark there, docs/semantics/windows.md section 2), and the window needs its exact
value (``ts // bucket_ms``). So ``ts`` is always the exact int, however long its
literal: the kernel hands a literal beyond 64 bits over as text, made exact here
(:func:`exact_ts`).

An event travels as a plain tuple (:data:`MessageEvent`), cheaper to build and to pickle
than an object; :data:`WORKSPACE` ... :data:`RAW` name its fields' positions.
"""

from __future__ import annotations

from typing import cast

from rankflow import _native
from rankflow.state.events import SHAPE_REASONS, DeadLetter
from rankflow.state.json_exact import exact_int

__all__ = [
    "EXPIRED", "REASONS",
    "ID_FIELDS", "FIELDS", "MAX_ID_CHARS", "MessageEvent", "WORKSPACE", "CHANNEL", "USER", "TS", "OFFSET", "RAW",
    "exact_ts", "parse_message", "parse_message_records",
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


def exact_ts(ts: int | str) -> int:
    """The kernel's ``ts``: an int, or the literal of one beyond 64 bits (made exact here)."""
    return ts if type(ts) is int else exact_int(ts)  # type: ignore[arg-type]


def parse_message(raw: bytes, partition: str, offset: int, epoch: int) -> MessageEvent | DeadLetter:
    """One input record as a :data:`MessageEvent`, or as a dead letter saying which check failed first.

    A dead letter is a (named) tuple too: tell the two apart with
    ``isinstance(result, DeadLetter)``.

    >>> parse_message(b'{"workspace_id":"w","channel_id":"c","user_id":"u","ts":5}', "m.jsonl", 0, 1)
    ('w', 'c', 'u', 5, 0, b'{"workspace_id":"w","channel_id":"c","user_id":"u","ts":5}')
    >>> parse_message(b"", "m.jsonl", 3, 1)[:4]  # an empty line is an event too: an invalid one
    ('invalid_json', 'expected a value: unexpected end of data at byte 0', 'm.jsonl', 3)
    """
    checked = _native.check_message(raw)
    if len(checked) == 2:
        return DeadLetter(checked[0], checked[1], partition, offset, raw, epoch)
    ws, ch, user, ts = checked
    return ws, ch, user, exact_ts(ts), offset, raw


def parse_message_records(
    records: list[bytes], offsets: range | list[int], partition: str, epoch: int
) -> tuple[list[MessageEvent], list[tuple[str, DeadLetter]]]:
    """Parse a batch: the valid :data:`MessageEvent`\\ s and ``(partition, dead letter)`` pairs.

    One call into the kernel per batch (the activity flow's own parse step routes as it
    checks: ``operators.window_counter``; the seed design's baseline checks with this).

    >>> line = b'{"workspace_id":"w1","channel_id":"c1","user_id":"ana","ts":60000}'
    >>> events, dead = parse_message_records([line, b"[]", b'{"ts": 1}'], range(7, 10), "p0", 1)
    >>> [event[:5] for event in events], events[0][RAW] is line
    ([('w1', 'c1', 'ana', 60000, 7)], True)
    >>> [(partition, d.reason, d.offset) for partition, d in dead]
    [('p0', 'not_an_object', 8), ('p0', 'missing_field', 9)]
    """
    if type(offsets) is range and offsets.step == 1:
        events, refused = _native.check_messages(records, offsets.start)
    else:
        events, refused = _native.check_messages(records, 0, list(offsets))
    for i, (ws, ch, user, ts, offset, raw) in enumerate(events):
        if type(ts) is not int:
            events[i] = (ws, ch, user, exact_ts(ts), offset, raw)
    dead = [(partition, DeadLetter(reason, detail, partition, offsets[i], records[i], epoch))
            for i, reason, detail in refused]
    return cast("list[MessageEvent]", events), dead
