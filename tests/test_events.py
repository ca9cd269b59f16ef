"""Validation of input records (state.events), SEMANTICS.md section 1."""

from __future__ import annotations

import json

import orjson
import pytest

from rankflow.state.events import DeadLetter, PlaybackEvent, parse_event

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
