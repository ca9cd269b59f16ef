"""Validation of input records (state.events), docs/semantics/listeners.md section 1."""

from __future__ import annotations

import json

import orjson
import pytest

from rankflow.state.events import DeadLetter, PlaybackEvent, parse_event, parse_records

GOOD = {"user_id": "u", "playback_id": "p", "song_id": "s", "type": "START", "version": 3, "ts": 10}


def reason(obj_or_raw) -> str:
    raw = obj_or_raw if isinstance(obj_or_raw, bytes) else json.dumps(obj_or_raw).encode()
    out = parse_event(raw, "f", 7, 1)
    assert isinstance(out, DeadLetter), out
    assert out.partition == "f" and out.offset == 7 and out.raw == raw
    return out.reason


def test_valid_event_with_extra_fields():
    out = parse_event(orjson.dumps({**GOOD, "device": "car"}), "f", 0, 1)
    assert isinstance(out, PlaybackEvent)
    assert (out.user_id, out.playback_id, out.song_id, out.type, out.version, out.ts) == ("u", "p", "s", "START", 3, 10)


@pytest.mark.parametrize("raw,expected", [
    (b"", "invalid_json"), (b"{", "invalid_json"), (b"NaN", "invalid_json"), (b"\xff", "invalid_json"),
    (b"[]", "not_an_object"), (b"3", "not_an_object"),
])
def test_not_json_or_not_an_object(raw, expected):
    assert reason(raw) == expected


@pytest.mark.parametrize("change,expected", [
    ({"user_id": None}, "wrong_type"), ({"song_id": 5}, "wrong_type"),
    ({"playback_id": ""}, "out_of_range"), ({"user_id": "x" * 257}, "out_of_range"),
    ({"type": "PAUSE"}, "unknown_type"), ({"type": "start"}, "unknown_type"), ({"type": 1}, "wrong_type"),
    ({"version": True}, "wrong_type"), ({"version": "1"}, "wrong_type"), ({"version": 1.5}, "wrong_type"),
    ({"version": 1.0}, "wrong_type"), ({"version": -1}, "out_of_range"), ({"ts": -5}, "out_of_range"),
])
def test_field_rules(change, expected):
    assert reason({**GOOD, **change}) == expected


@pytest.mark.parametrize("field", ["user_id", "playback_id", "song_id", "type", "version", "ts"])
def test_missing_fields(field):
    assert reason({k: v for k, v in GOOD.items() if k != field}) == "missing_field"


def test_limits_are_inclusive_and_big_integers_are_integers():
    out = parse_event(json.dumps({**GOOD, "user_id": "é" * 256, "version": 2**70, "ts": 0}).encode(), "f", 0, 1)
    assert isinstance(out, PlaybackEvent) and out.version == 2**70


def test_dead_letter_json():
    dl = parse_event(b"nope\xff", "events.jsonl", 12, 1)
    assert orjson.loads(dl.to_json()) == {
        "reason": "invalid_json", "detail": dl.detail,
        "position": {"partition": "events.jsonl", "offset": 12}, "raw": "nope\\xff"}


# docs/semantics/listeners.md 1 and 6: a TIMEOUT also carries idle_ms, an integer >= 1 (not a boolean).
TIMER = {**GOOD, "type": "TIMEOUT", "idle_ms": 45_000}


def test_a_timeout_carries_its_idle_ms():
    out = parse_event(orjson.dumps(TIMER), "f", 3, 1)
    assert isinstance(out, PlaybackEvent) and (out.type, out.ts, out.idle_ms, out.offset) == ("TIMEOUT", 10, 45_000, 3)
    assert parse_event(json.dumps({**TIMER, "idle_ms": 2**70}).encode(), "f", 0, 1).idle_ms == 2**70
    assert parse_event(orjson.dumps({**TIMER, "idle_ms": 1}), "f", 0, 1).idle_ms == 1, "the least allowed"


@pytest.mark.parametrize("change,expected", [
    ({"idle_ms": 0}, "out_of_range"), ({"idle_ms": -45_000}, "out_of_range"),
    ({"idle_ms": True}, "wrong_type"), ({"idle_ms": False}, "wrong_type"), ({"idle_ms": "45000"}, "wrong_type"),
    ({"idle_ms": 1.5}, "wrong_type"), ({"idle_ms": 45_000.0}, "wrong_type"), ({"idle_ms": None}, "wrong_type"),
    ({"idle_ms": [45_000]}, "wrong_type"), ({"type": "timeout"}, "unknown_type"), ({"ts": -1}, "out_of_range"),
])
def test_malformed_timeouts(change, expected):
    assert reason({**TIMER, **change}) == expected


def test_a_timeout_without_idle_ms_is_missing_a_field():
    raw = orjson.dumps({k: v for k, v in TIMER.items() if k != "idle_ms"})
    out = parse_event(raw, "f", 0, 1)
    assert isinstance(out, DeadLetter) and (out.reason, out.detail) == ("missing_field", "idle_ms is missing")


def test_idle_ms_is_required_on_timeouts_only():
    for etype in ("START", "STOP", "HEARTBEAT"):
        for idle in (0, True, "x", None):
            out = parse_event(orjson.dumps({**GOOD, "type": etype, "idle_ms": idle}), "f", 0, 1)
            assert isinstance(out, PlaybackEvent) and out.idle_ms == 0, "an ignored extra field"


def test_the_batch_parser_agrees_with_parse_event_on_timeouts():
    """The fast path takes the players' types only; every TIMEOUT goes through the full rules."""
    records = [orjson.dumps(TIMER), orjson.dumps({**TIMER, "idle_ms": 0}), orjson.dumps({**TIMER, "idle_ms": True}),
               orjson.dumps({k: v for k, v in TIMER.items() if k != "idle_ms"}), orjson.dumps(GOOD),
               orjson.dumps({**GOOD, "idle_ms": "ignored"})]
    events, dead = parse_records(records, range(len(records)), "f", 1)
    assert [tuple(e) for e in events] == [("u", "p", "s", "TIMEOUT", 3, 10, 0, records[0], 45_000),
                                          ("u", "p", "s", "START", 3, 10, 4, records[4], 0),
                                          ("u", "p", "s", "START", 3, 10, 5, records[5], 0)]
    assert [(p, d.offset, d.reason) for p, d in dead] == [("f", 1, "out_of_range"), ("f", 2, "wrong_type"),
                                                          ("f", 3, "missing_field")]
