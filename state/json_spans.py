"""Where the parts of a JSON text are, as byte spans: the items of an array, the members of an object.

The ingest routes produce each event as the bytes the client sent, never re-encoded
(re-encoding rounds an integer beyond 64 bits and fails on deep nesting), so they
need each item of an array body as it was written; a match result gets its stamps
spliced in beside its members. Only the structure is read here (strings, brackets,
commas): whether an item is valid JSON is for the flow's own parser to say, so
that ingest and flow can never disagree. Scanning never recurses, whatever the depth.

A structure that cannot be an array (an item missing, a bracket that does not match,
text after the end) is a :class:`ValueError`.
"""

from __future__ import annotations

import re

import orjson

WHITESPACE = b" \t\n\r"
"""JSON's insignificant whitespace (RFC 8259 section 2)."""

_STRING = rb'"(?:[^"\\]++|\\.)*+"'
_TOP = re.compile(rb'(?:[^"\[\]{},]++|' + _STRING + rb')*+', re.S)
"""Anything up to the next bracket or comma of the current level (strings skipped whole)."""
_INNER = re.compile(rb'(?:[^"\[\]{}]++|' + _STRING + rb')*+', re.S)
"""Inside a nested container commas do not matter: up to its next bracket."""
_FLAT = re.compile(rb'[ \t\n\r]*\{(?:[^"\[\]{}]++|' + _STRING + rb')*+\}', re.S)
"""An object holding no container, the common event: skipped in one match."""
_KEY = re.compile(rb'[ \t\n\r]*(' + _STRING + rb')[ \t\n\r]*:', re.S)
_CLOSE = {ord("["): ord("]"), ord("{"): ord("}")}
_BRACKETS = re.compile(rb'(?:[^"\[\]{}]++|' + _STRING + rb')*+(.)', re.S)


def value_end(text: bytes, pos: int) -> int:
    """Where the value starting at ``pos`` ends: the index of the comma or closing
    bracket of the enclosing container that follows it (``len(text)`` at the end).

    >>> value_end(b'[{"a": [1, "],"]}, 2]', 1)
    17
    """
    stack: list[int] = []
    end = len(text)
    flat = _FLAT.match(text, pos)
    if flat is not None:
        pos = flat.end()
    while True:
        span = (_INNER if stack else _TOP).match(text, pos)
        assert span is not None  # both patterns match the empty string
        pos = span.end()
        if pos == end:
            return pos
        c = text[pos]
        if c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c == 0x22:  # a string that never ends
            raise ValueError(f"a string is not closed at byte {pos}")
        elif not stack:  # a comma or a closing bracket of the enclosing level
            return pos
        elif c == stack[-1]:
            stack.pop()
        elif c != 0x2C:
            raise ValueError(f"unexpected {chr(c)!r} at byte {pos}")
        pos += 1


def array_items(text: bytes) -> list[bytes] | None:
    """The items of a JSON array text, each as written (without the whitespace around
    it); ``None`` when ``text`` is not an array (one value, then).

    >>> array_items(b' [ {"a": [1, 2]} , 18446744073709551617 ]\\n')
    [b'{"a": [1, 2]}', b'18446744073709551617']
    >>> array_items(b'[]'), array_items(b'{"a": 1}')
    ([], None)
    >>> array_items(b'[1, ]')
    Traceback (most recent call last):
    ValueError: item 1 is empty
    """
    start = len(text) - len(text.lstrip(WHITESPACE))
    if text[start:start + 1] != b"[":
        return None
    pos = start + 1
    if text[pos:].lstrip(WHITESPACE)[:1] == b"]":
        _nothing_after(text, text.index(b"]", pos) + 1)
        return []
    items: list[bytes] = []
    while True:
        end = value_end(text, pos)
        item = text[pos:end].strip(WHITESPACE)
        if not item:
            raise ValueError(f"item {len(items)} is empty")
        items.append(item)
        if end == len(text):
            raise ValueError("the array is not closed")
        if text[end] == 0x5D:  # ]
            _nothing_after(text, end + 1)
            return items
        if text[end] != 0x2C:  # a closing brace
            raise ValueError(f"unexpected '}}' at byte {end}")
        pos = end + 1


def _nothing_after(text: bytes, pos: int) -> None:
    if text[pos:].strip(WHITESPACE):
        raise ValueError(f"text after the end of the array, at byte {pos}")


def object_members(text: bytes) -> list[tuple[str, int, int]]:
    """The members of a JSON object text that is valid JSON: ``(key, start, end)``
    for each, the key decoded (escapes and all) and ``text[start:end]`` the member as
    written, ``"key": value``.

    >>> raw = b'{"a\\\\u0062": [1, {"c": 2}], "d": "}"}'
    >>> [(key, raw[s:e]) for key, s, e in object_members(raw)]
    [('ab', b'"a\\\\u0062": [1, {"c": 2}]'), ('d', b'"d": "}"')]
    """
    pos = text.index(b"{") + 1
    if text[pos:].lstrip(WHITESPACE)[:1] == b"}":
        return []
    members = []
    while True:
        key = _KEY.match(text, pos)
        if key is None:
            raise ValueError(f"no member key at byte {pos}")
        end = value_end(text, key.end())
        members.append((orjson.loads(key.group(1)), key.start(1), len(text[:end].rstrip(WHITESPACE))))
        if end == len(text) or text[end] != 0x2C:
            return members
        pos = end + 1


def member_value(text: bytes, field: str) -> bytes | None:
    """The value of ``field`` in a valid JSON object text, as written (the last one,
    as a parser reads duplicate keys); ``None`` when it has none.

    >>> member_value(b'{"v": 1, "x": [[]], "v" : 18446744073709551617 }', "v")
    b'18446744073709551617'
    """
    found = None
    for key, start, end in object_members(text):
        if key == field:
            found = text[start:end]
    if found is None:
        return None
    named = _KEY.match(found)
    assert named is not None  # a member's text starts with its key
    return found[named.end():].strip(WHITESPACE)


def nesting_depth(text: bytes) -> int:
    """How deep containers nest in ``text`` (strings skipped; exact for valid JSON).

    >>> nesting_depth(b'{"a": [1, {"b": "[[["}]}'), nesting_depth(b'7')
    (3, 0)
    """
    depth = deepest = pos = 0
    end = len(text)
    while pos < end:
        found = _BRACKETS.match(text, pos)
        if found is None:
            return deepest
        c = text[found.end() - 1]
        if c == 0x22:  # a string that never ends: nothing more to count
            return deepest
        depth += 1 if c in _CLOSE else -1
        deepest = max(deepest, depth)
        pos = found.end()
    return deepest
