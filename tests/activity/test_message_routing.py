"""The activity flow's parse step in the kernel (``operators.window_counter.MessageParser`` over
``_native.MessageRouter``) against a reference model of the routing written here.

The model is what the flow did in Python before the kernel: each valid event (checks 1 to 3
as ``parse_message`` says) goes to counter partition ``crc32(workspace) % P`` with its
batch's running greatest ``ts`` (``seen``); unless every event must be seen (``per_event``)
or one of the partition's has a ``seen`` beyond 64 bits, its events on time within their
batch (the bucket not before the window of their ``seen``) are summed per bucket and
``(workspace, channel)`` and the others listed one by one (``late``). Either way the part one
by one is exactly the model's events, so nothing but the form changes.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow.operators.window_counter import MessageParser, part_events
from rankflow.state.events import DeadLetter
from rankflow.state.message_events import parse_message

ids = st.sampled_from(["a", "b", "é", "🎉", "w" * 64, "zz"])
times = (st.integers(0, 20).map(lambda m: m * 17_000) | st.integers(0, 2**64 + 5)
         | st.sampled_from([2**64 - 1, 2**64, 10**30]))


@st.composite
def records(draw) -> bytes:
    """A message line: mostly valid, now and then refused by checks 1 to 3."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from([b"", b"{", b"[]", b'{"ts": 1}', b'{"workspace_id": "", "channel_id": "c"}']))
    obj = {"workspace_id": draw(ids), "channel_id": draw(ids), "user_id": draw(ids), "ts": draw(times)}
    if kind == 1:
        obj["ts"] = -draw(st.integers(1, 10))
    return json.dumps(obj, ensure_ascii=draw(st.booleans())).encode()


def model(lines: list[bytes], start: int, partitions: int, bucket_ms: int, n: int, per_event: bool):
    """Per counter partition its events ``(ws, ch, user, ts, seen, offset, raw)`` and whether it sums."""
    parts: list[list[tuple]] = [[] for _ in range(partitions)]
    dead = []
    seen = -1
    for offset, raw in enumerate(lines, start):
        event = parse_message(raw, "p", offset, 4)
        if isinstance(event, DeadLetter):
            dead.append(("p", event))
            continue
        ws, ch, user, ts = event[:4]
        seen = max(seen, ts)
        parts[zlib.crc32(ws.encode()) % partitions].append((ws, ch, user, ts, seen, offset, raw))
    sums = [not per_event and bool(part) and all(e[4] < 2**64 for e in part) for part in parts]
    return parts, sums, dead, (seen if seen >= 0 else None)


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(records(), max_size=30), start=st.integers(0, 1000), partitions=st.integers(1, 5),
       bucket_ms=st.sampled_from([1, 1000, 60_000]), n=st.integers(1, 4), per_event=st.booleans(),
       listed=st.booleans())
def test_the_kernel_routes_as_the_model(lines, start, partitions, bucket_ms, n, per_event, listed):
    offsets = list(range(start, start + len(lines))) if listed else range(start, start + len(lines))
    parts, dead = MessageParser(partitions, bucket_ms, n, per_event)(lines, offsets, "p", 4)
    expected, sums, expected_dead, seen = model(lines, start, partitions, bucket_ms, n, per_event)
    assert dead == expected_dead
    assert len(parts) == partitions
    for part, events, summed in zip(parts, expected, sums):
        assert part.seen == seen
        assert part_events(part) == events
        assert all(type(e[3]) is int and type(e[4]) is int for e in part_events(part))
        assert (part.counts is not None) == summed
        if summed:
            def on_time(e):
                return e[3] // bucket_ms >= e[4] // bucket_ms - n + 1

            assert part.events is None and part.raws == [e[6] for e in events]
            assert {(b, pair): c for b, keys in part.counts.items() for pair, c in keys.items()} == Counter(
                (e[3] // bucket_ms, (e[0], e[1])) for e in events if on_time(e))
            assert list(part.counts) == sorted(part.counts)
            assert part.late == [e for e in events if not on_time(e)]
        else:
            assert part.events == events and part.raws == part.late == []
