"""Validation of activity (message) events (state.message_events over the kernel's
native/src/messages.rs), docs/semantics/windows.md section 1 checks 1 to 3.

Every outcome is checked four ways: the kernel's batch path, its one-line path, the
activity flow's routing parse (``operators.window_counter.MessageParser``) and a small
model of section 1 written here with the standard library only (the oracle).
"""

from __future__ import annotations

import decimal
import doctest
import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rankflow.state.json_exact
import rankflow.state.message_events
from rankflow.operators.window_counter import MessageParser, part_events
from rankflow.state.events import DeadLetter
from rankflow.state.json_exact import exact_int
from rankflow.state.message_events import (
    CHANNEL,
    EXPIRED,
    OFFSET,
    RAW,
    REASONS,
    TS,
    USER,
    WORKSPACE,
    parse_message,
    parse_message_records,
)

GOOD = {"workspace_id": "w1", "channel_id": "general", "user_id": "ana", "ts": 1_767_225_600_000}
FIELDS = list(GOOD)
IDS = FIELDS[:3]


# -- an independent reading of docs/semantics/windows.md section 1 ---------------------------------------
def _reject_constant(name: str) -> None:
    raise ValueError(name)


def _encodes(value: Any) -> bool:
    """False when a string anywhere holds an unpaired surrogate (json reads ``"\\ud800"`` into one)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_encodes(k) and _encodes(v) for k, v in value.items())
    if isinstance(value, list):
        return all(map(_encodes, value))
    return True


def model(raw: bytes) -> str | tuple[str, str, str, int]:
    """The reason of checks 1 to 3, or the event's four fields."""
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant,
                         parse_int=lambda s: int(decimal.Decimal(s)))  # any size, no 4300-digit limit
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return "invalid_json"
    if not _encodes(obj):
        return "invalid_json"
    if not isinstance(obj, dict):
        return "not_an_object"
    for f in FIELDS:  # field by field in the table's order, each field completely before the next
        if f not in obj:
            return "missing_field"
        if (type(obj[f]) is not int) if f == "ts" else not isinstance(obj[f], str):
            return "wrong_type"
        if (obj[f] < 0) if f == "ts" else not 1 <= len(obj[f]) <= 64:
            return "out_of_range"
    return obj["workspace_id"], obj["channel_id"], obj["user_id"], obj["ts"]


def outcome(raw: bytes) -> str:
    """``"ok"`` or the reason, the same through the batch path, the one-line path, the routing parse and the model."""
    one = parse_message(raw, "messages", 7, 3)
    events, dead = parse_message_records([raw], [7], "messages", 3)
    parts, routed_dead = MessageParser(3, 60_000, 60, per_event=False)([raw], [7], "messages", 3)
    routed = [e for part in parts for e in part_events(part)]
    assert routed_dead == dead and [e[:4] + e[5:] for e in routed] == events
    expected = model(raw)
    if isinstance(one, DeadLetter):
        assert events == [] and dead == [("messages", one)]
        assert (one.partition, one.offset, one.raw, one.epoch) == ("messages", 7, raw, 3) and one.detail
        assert expected == one.reason, "the model disagrees"
        return one.reason
    assert type(one) is tuple and events == [one] and dead == []
    assert one[OFFSET] == 7 and one[RAW] is raw and events[0][RAW] is raw
    assert one[:4] == expected, "the model disagrees"
    assert all(type(v) is str for v in one[:3]) and type(one[TS]) is int
    return "ok"


DROP = object()  # line(field=DROP): the field is absent


def line(**changes: Any) -> bytes:
    obj = {**GOOD, **changes}
    return json.dumps({k: v for k, v in obj.items() if v is not DROP}, ensure_ascii=False).encode()


def with_literal(field: str, literal: str | bytes) -> bytes:
    """GOOD with ``field`` written as the JSON text ``literal`` (which json.dumps would not write)."""
    literal = literal.encode() if isinstance(literal, str) else literal
    return line(**{field: DROP})[:-1] + b', "%s": %s}' % (field.encode(), literal)


def test_the_docstring_examples_hold():
    for module in (rankflow.state.message_events, rankflow.state.json_exact):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


def test_public_names():
    assert (WORKSPACE, CHANNEL, USER, TS, OFFSET, RAW) == (0, 1, 2, 3, 4, 5)
    assert EXPIRED == "expired"
    assert REASONS == ("invalid_json", "not_an_object", "missing_field", "wrong_type", "out_of_range", "expired")


def test_a_valid_event_with_extra_fields():
    raw = line(extra={"x": [1, 2.5, None, 10**30]}, sig=17, Ts=-1)
    assert parse_message(raw, "m.jsonl", 0, 1) == ("w1", "general", "ana", 1_767_225_600_000, 0, raw)
    assert outcome(raw) == "ok"


def test_the_event_is_its_fields_in_order():
    raw = json.dumps({"ts": 5, "user_id": "u", "channel_id": "c", "workspace_id": "w"}).encode()
    assert parse_message(raw, "p", 9, 1) == ("w", "c", "u", 5, 9, raw)
    assert outcome(raw) == "ok"


# -- check 1 ----------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b"", b" ", b"\t", b"{", b"}", b"NaN", b"Infinity", b"-Infinity", b'{"ts": NaN}', b'{"x": -Infinity}', b"nan",
    b"\xff", b'{"user_id": "\xff"}', b'{"x": "\xed\xa0\x80"}',  # a surrogate encoded in UTF-8 is not UTF-8
    b'{"x": "\xc0\xaf"}',  # an overlong encoding
    b'{"x": "\\ud800"}', b'{"x": "\\udd1e"}', b'{"\\ud834": 1}', b'["\\ud834"]', b'{"x": "\\ud834\\u0041"}',
    b'{"x": "\\udd1e\\ud834"}',  # the pair the wrong way round: two lone surrogates
    b'\xef\xbb\xbf{"x": 1}', b'{"x": 1,}', b'{"x": 01}', b"{'x': 1}", b'{"x": 1} 2', b'{"x": 1}{}', b'{"x": "\x01"}',
    b'{"x": 1.}', b'{"x": .5}', b'{"x": +1}', b'{"x": 0x10}', b"{x: 1}", '{"x": 1}'.encode("utf-16"),
    b'{"ts": 1' + b"]" * 5000, b"[" * 100_000 + b"]" * 100_000,  # nested deeper than any parser here goes
])
def test_invalid_json(raw):
    assert outcome(raw) == "invalid_json"


@pytest.mark.parametrize("note", [b'"\\ud800"', b"NaN", b"Infinity", b'"\xff"'])
def test_invalid_json_with_all_fields_valid(note):
    assert outcome(line()[:-1] + b', "note": ' + note + b"}") == "invalid_json"


def test_a_paired_surrogate_escape_is_one_character():
    raw = with_literal("user_id", '"\\ud834\\udd1e"')
    assert outcome(raw) == "ok" and parse_message(raw, "m", 0, 1)[USER] == "𝄞"
    assert outcome(with_literal("channel_id", '"' + "\\ud834\\udd1e" * 64 + '"')) == "ok"
    assert outcome(with_literal("channel_id", '"' + "\\ud834\\udd1e" * 65 + '"')) == "out_of_range"


def test_whitespace_around_the_value_is_fine():
    assert outcome(b" \t\r\n" + line() + b"\r\n ") == "ok"


# -- check 2 ----------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [b"[]", b"3", b"-1", b'"x"', b"null", b"true", b"false", b"[{}]", b"0.5",
                                 b"18446744073709551616", b"1e400", b"9" * 5000, b'"\\ud834\\udd1e"'])
def test_not_an_object(raw):
    assert outcome(raw) == "not_an_object"


# -- check 3 ----------------------------------------------------------------------------

@pytest.mark.parametrize("field", FIELDS)
def test_missing_field(field):
    assert outcome(line(**{field: DROP})) == "missing_field"


def test_an_empty_object_misses_its_first_field():
    assert outcome(b"{}") == "missing_field"
    assert parse_message(b"{}", "m", 0, 1).detail == "workspace_id is missing"


@pytest.mark.parametrize("name", ["Workspace_id", "CHANNEL_ID", "user_ID", "TS", "Ts", "ts ", " ts", "userid"])
def test_names_are_case_sensitive(name):
    right = {"workspace_id": "workspace_id", "channel_id": "channel_id", "user_id": "user_id", "userid": "user_id",
             "ts": "ts"}[name.strip().lower()]
    raw = json.dumps({**{k: v for k, v in GOOD.items() if k != right}, name: GOOD[right]}).encode()
    assert outcome(raw) == "missing_field"


@pytest.mark.parametrize("field,value", [
    *[(f, v) for f in IDS for v in (None, 5, 0, 1.5, ["w"], {"w": 1}, True, False)],
    *[("ts", v) for v in (None, "5", "", 10.0, 1.5, -1.5, True, False, [1], {"ms": 1})],
])
def test_wrong_type(field, value):
    assert outcome(line(**{field: value})) == "wrong_type"


@pytest.mark.parametrize("literal", [b"1.0", b"0.0", b"-0.0", b"1e3", b"1E3", b"1e+3", b"1.0e+2", b"1e-3", b"-1e3",
                                     b"1e400", b"-1e400", b"100000000000000000000.0", b"1" + b"0" * 400 + b".0",
                                     b"true", b"false", b"null"])
def test_numbers_with_a_fraction_or_exponent_are_not_integers(literal):
    assert outcome(with_literal("ts", literal)) == "wrong_type"


@pytest.mark.parametrize("field,text", [
    *[(f, t) for f in IDS for t in ('""', json.dumps("x" * 65), json.dumps("é" * 65, ensure_ascii=False),
                                    json.dumps("🎉" * 65, ensure_ascii=False), json.dumps("🎉" * 65),
                                    json.dumps("e\u0301" * 33, ensure_ascii=False))],  # 66 code points
    ("ts", "-1"), ("ts", "-100000000000000000000"), ("ts", str(-(2**63))), ("ts", str(-(2**63) - 1)),
    ("ts", str(-(2**64))), ("ts", "-" + "1" * 401), ("ts", "-" + "9" * 5000),
])
def test_out_of_range(field, text):
    assert outcome(with_literal(field, text)) == "out_of_range"


@pytest.mark.parametrize("field,value", [
    *[(f, v) for f in IDS for v in ("x", " ", "x" * 64, "é" * 64, "🎉" * 64, "e\u0301" * 32, "\x00", "a|b:c")],
    ("ts", 0), ("ts", 1), ("ts", 2**31), ("ts", 2**63 - 1), ("ts", 2**63), ("ts", 2**64 - 1), ("ts", 2**64),
    ("ts", 10**20), ("ts", 10**30), ("ts", 10**400),
])
def test_valid_values_and_the_inclusive_limits(field, value):
    raw = line(**{field: value})
    assert outcome(raw) == "ok"
    assert parse_message(raw, "m", 0, 1)[FIELDS.index(field)] == value


def test_64_emoji_are_64_characters_and_256_bytes():
    raw = line(channel_id="🎉" * 64)
    assert len("🎉" * 64) == 64 and len(("🎉" * 64).encode()) == 256
    assert outcome(raw) == "ok" and outcome(line(channel_id="🎉" * 65)) == "out_of_range"


def test_ids_are_kept_exactly():
    """No case folding, no Unicode normalization: what was sent is the id."""
    for text in ("Général", "Ge\u0301ne\u0301ral", "GENERAL", "ﬁle", "Å", "Å"):
        assert parse_message(line(channel_id=text), "m", 0, 1)[CHANNEL] == text


def test_minus_zero_is_the_integer_zero():
    raw = with_literal("ts", "-0")
    assert outcome(raw) == "ok" and parse_message(raw, "m", 0, 1)[TS] == 0


@pytest.mark.parametrize("digits", [20, 21, 40, 309, 400, 4300, 4301, 5000, 100_000])
def test_big_ts_is_exact_whatever_its_length(digits):
    """Beyond 64 bits orjson reads a float (or fails); beyond 4300 digits int() refuses: ts stays exact."""
    text = "1" + "0" * (digits - 6) + "12345"  # str(int) refuses beyond 4300 digits too
    value = 10 ** (digits - 1) + 12345
    raw = with_literal("ts", text)
    event = parse_message(raw, "m", 0, 1)
    assert event[TS] == value and type(event[TS]) is int
    events, dead = parse_message_records([raw], [0], "m", 1)
    assert dead == [] and events[0][TS] == value
    assert event[TS] // 60_000 == value // 60_000  # the bucket, exactly


def test_a_5000_digit_ts_is_valid():
    text = "7" * 5000
    raw = with_literal("ts", text)
    assert outcome(raw) == "ok"
    assert parse_message(raw, "m", 0, 1)[TS] == exact_int(text) == int(decimal.Decimal(text))


def test_exact_int_agrees_with_int_at_every_length():
    for n in (1, 599, 600, 601, 1199, 1200, 1201, 4300):
        text = ("1234567890" * 500)[:n]
        assert exact_int(text) == int(text) and exact_int("-" + text) == -int(text)


def test_huge_numbers_in_ignored_fields_are_fine():
    raw = line()[:-1] + b', "x": 18446744073709551616, "y": ' + b"9" * 5000 + b', "z": 1e400, "n": -1e400}'
    assert outcome(raw) == "ok"


def permutations_of(obj: dict) -> list[bytes]:
    """The same object with its fields in every order."""
    return [json.dumps({k: obj[k] for k in order}, ensure_ascii=False).encode()
            for order in itertools.permutations(list(obj))]


@pytest.mark.parametrize("obj,expected", [
    ({**GOOD, "ts": "5", "workspace_id": DROP}, "missing_field"),  # missing, then a later wrong type
    ({**GOOD, "ts": -1, "user_id": DROP}, "missing_field"),  # missing, then a later out of range
    ({**GOOD, "user_id": None, "channel_id": DROP}, "missing_field"),  # null is present: wrong type, not missing
    ({**GOOD, "workspace_id": "", "ts": 5.5}, "out_of_range"),  # workspace_id is done before ts is looked at
    ({**GOOD, "workspace_id": "", "ts": True}, "out_of_range"),
    ({**GOOD, "workspace_id": "x" * 65, "channel_id": 5}, "out_of_range"),
    ({**GOOD, "workspace_id": "", "user_id": DROP}, "out_of_range"),  # out of range beats a later missing field
    ({**GOOD, "channel_id": None, "ts": DROP}, "wrong_type"),  # wrong type beats a later missing field
    ({**GOOD, "user_id": 7, "ts": -1}, "wrong_type"),
    ({**GOOD, "ts": -100000000000000000000, "channel_id": True}, "wrong_type"),
    ({**GOOD, "channel_id": "", "ts": -1, "user_id": DROP}, "out_of_range"),
    ({**GOOD, "channel_id": "x" * 65, "ts": -1}, "out_of_range"),
    ({**GOOD, "user_id": "", "channel_id": 1.5}, "wrong_type"),  # channel_id comes first
])
def test_check_3_goes_field_by_field_in_the_tables_order(obj, expected):
    """docs/semantics/windows.md 1.3: each field completely before the next; the order in the line does not matter."""
    obj = {k: v for k, v in obj.items() if v is not DROP}
    for raw in permutations_of(obj):
        assert outcome(raw) == expected, raw


_FAULTS = {"missing_field": DROP, "wrong_type": None, "out_of_range": ""}
"""One value per reason, for an id field; ``ts`` has its own (:data:`_TS_FAULTS`)."""
_TS_FAULTS = {"missing_field": DROP, "wrong_type": True, "out_of_range": -1}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), st.sampled_from(list(_FAULTS)), min_size=1), st.randoms())
def test_the_first_failing_field_in_the_tables_order_names_the_reason(faults, rnd):
    """Any faults on any fields, the fields in any order in the line: the first faulty field
    of the table (workspace_id, channel_id, user_id, ts) decides, and the detail names it."""
    obj = {f: (_TS_FAULTS if f == "ts" else _FAULTS)[faults[f]] if f in faults else GOOD[f] for f in FIELDS}
    order = list(obj)
    rnd.shuffle(order)
    raw = json.dumps({f: obj[f] for f in order if obj[f] is not DROP}).encode()
    first = min(faults, key=FIELDS.index)
    assert outcome(raw) == faults[first]
    assert parse_message(raw, "m", 0, 1).detail.startswith(first + " ")


def test_a_repeated_key_takes_its_last_value_on_every_path():
    assert outcome(line()[:-1] + b', "ts": "5"}') == "wrong_type"
    assert outcome(b'{"ts": "5", ' + line()[1:]) == "ok"
    assert outcome(line()[:-1] + b', "ts": 100000000000000000000}') == "ok"
    assert parse_message(line()[:-1] + b', "ts": 100000000000000000000}', "m", 0, 1)[TS] == 10**20


def test_null_present_is_wrong_type_not_missing():
    assert outcome(line(ts=None)) == "wrong_type"
    assert outcome(line(ts=DROP)) == "missing_field"


def test_details_name_the_fields():
    def detail(raw: bytes) -> str:
        return parse_message(raw, "m", 0, 1).detail

    assert detail(line(ts=DROP, channel_id=DROP)) == "channel_id is missing"
    assert detail(line(ts=1.5, user_id=None)) == "user_id must be a string"
    assert detail(line(ts=1.5)) == "ts must be an integer"
    assert detail(line(workspace_id="", ts=-1)) == "workspace_id must be 1 to 64 characters long"
    assert detail(line(ts=-1)) == "ts must be >= 0"
    assert detail(b"[]") == "expected a JSON object, got an array"
    assert detail(b"null") == "expected a JSON object, got null"
    assert detail(b'{"ts": "\\ud800"}') == "a string holds an unpaired surrogate escape"


# -- the functions on their own -------------------------------------------------------------

def test_big_integers_are_exact_and_negative_ones_out_of_range():
    raw = with_literal("ts", "18446744073709551617")
    assert parse_message(raw, "m", 0, 1)[TS] == 18446744073709551617
    assert parse_message(with_literal("ts", "-18446744073709551617"), "m", 0, 1).reason == "out_of_range"
    assert parse_message(with_literal("ts", "50.0"), "m", 0, 1).reason == "wrong_type"


def test_batches_keep_their_order_valid_or_not():
    lines = [line(), b"", line(ts=1.0), line(channel_id="🎉"), with_literal("ts", "1" + "0" * 30), b"[]",
             line(user_id=DROP), line(workspace_id="")]
    events, dead = parse_message_records(lines, range(100, 108), "p3", 9)
    assert [e[OFFSET] for e in events] == [100, 103, 104]
    assert [(p, d.reason, d.offset, d.epoch) for p, d in dead] == [
        ("p3", "invalid_json", 101, 9), ("p3", "wrong_type", 102, 9), ("p3", "not_an_object", 105, 9),
        ("p3", "missing_field", 106, 9), ("p3", "out_of_range", 107, 9)]
    assert all(isinstance(d, DeadLetter) and d.raw is lines[d.offset - 100] for _, d in dead)
    assert events[1][:4] == ("w1", "🎉", "ana", GOOD["ts"]) and events[2][TS] == 10**30
    assert all(type(e) is tuple and len(e) == 6 for e in events)


def test_offsets_may_be_a_list():
    events, dead = parse_message_records([line(), b"x"], [5, 11], "p", 1)
    assert [e[OFFSET] for e in events] == [5] and [d.offset for _, d in dead] == [11]


def test_dead_letter_json():
    dl = parse_message(b'{"user_id": "\xff"}', "messages.jsonl", 12, 1)
    assert orjson.loads(dl.to_json()) == {
        "reason": "invalid_json", "detail": dl.detail,
        "position": {"partition": "messages.jsonl", "offset": 12}, "raw": '{"user_id": "\\xff"}'}


# -- random lines: the batch path, the one-line path and the model agree -------------------------

# JSON texts of field values: mostly valid ones, so that later checks are reached, and any others
_GOOD = {"id": [json.dumps(s, ensure_ascii=a) for s in ("w", "é" * 64, "🎉" * 64, "a|1:b", "𝄞") for a in (0, 1)],
         "int": ["0", "-0", "1767225600000", "18446744073709551615", "18446744073709551616", "1" + "0" * 30,
                 "9" * 400, "9" * 5000]}
_ANY = ['""', json.dumps("🎉" * 65, ensure_ascii=False), json.dumps("x" * 65), '"\\ud834"', '"\\udd1e"', '"\udcff"',
        "-1", "-0", "-100000000000000000000", "-" + "9" * 5000, "10.0", "1e3", "1E3", "-0.0", "1e400", "true",
        "false", "null", '"5"', "[]", "{}", "NaN", "Infinity", "01", "1.", '"\\ud834\\udd1e"']


@st.composite
def lines(draw) -> bytes:
    """An object with the four fields (sometimes one missing or misspelt), mostly valid values, in any order."""
    fields = {}
    for f in FIELDS:
        kind = "int" if f == "ts" else "id"
        fields[f] = draw(st.sampled_from(_GOOD[kind] if draw(st.integers(0, 3)) else _ANY))
    if draw(st.booleans()):
        fields["extra"] = draw(st.sampled_from(_ANY + ['{"ts": -1}', '["\\ud834\\udd1e"]']))
    order = draw(st.permutations(list(fields)))
    missing = draw(st.sampled_from([None] * 20 + FIELDS))
    rename = {f: draw(st.sampled_from([f] * 10 + [f.upper(), f + " "])) for f in fields}
    text = "{" + ", ".join(f'"{rename[f]}": {fields[f]}' for f in order if f != missing) + "}"
    return text.encode("utf-8", "surrogateescape")


@settings(max_examples=500, deadline=None)
@given(lines())
def test_random_events_agree_with_the_model(raw):
    outcome(raw)


def _json_values() -> st.SearchStrategy:
    scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**30), max_value=10**30)
               | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=70)
               | st.sampled_from(["", "🎉" * 64, "🎉" * 65, "x" * 64, "x" * 65]))
    return st.recursive(scalars, lambda children: st.lists(children, max_size=3)
                        | st.dictionaries(st.sampled_from(FIELDS + ["x", "TS"]) | st.text(max_size=5),
                                          children, max_size=6), max_leaves=6)


_ID = st.text(min_size=1, max_size=64) | st.text(min_size=60, max_size=66)
_TS = st.integers(min_value=0) | st.integers(min_value=2**63 - 2, max_value=10**40) | st.integers(max_value=0)


@st.composite
def json_ish(draw) -> bytes:
    """Arbitrary JSON values, objects with the four names most of the time, now and then cut or spliced."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=40))
    value = draw(_json_values())
    if draw(st.integers(0, 2)):
        value = {**(value if isinstance(value, dict) else {}),
                 **{f: draw((_TS if f == "ts" else _ID) if draw(st.integers(0, 4)) else _json_values())
                    for f in FIELDS if draw(st.integers(0, 12))}}
    text = json.dumps(value, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    cut = draw(st.integers(0, 15))
    if cut == 0 and text:
        text = text[:draw(st.integers(0, len(text) - 1))]
    elif cut == 1:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from([b" ", b",", b"NaN", b"\\ud800", b"\xff", b"1e3", b'"'])) + text[at:]
    return text


@settings(max_examples=600, deadline=None)
@given(json_ish())
def test_every_path_and_the_model_agree_on_any_input(raw):
    outcome(raw)


@settings(max_examples=100, deadline=None)
@given(st.lists(json_ish() | lines(), max_size=20))
def test_a_batch_is_its_lines_one_by_one(batch):
    events, dead = parse_message_records(batch, range(len(batch)), "p", 2)
    one_by_one = [parse_message(raw, "p", n, 2) for n, raw in enumerate(batch)]
    assert events == [r for r in one_by_one if not isinstance(r, DeadLetter)]
    assert dead == [("p", r) for r in one_by_one if isinstance(r, DeadLetter)]
