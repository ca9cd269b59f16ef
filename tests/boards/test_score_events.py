"""Validation of score events (state.score_events), docs/semantics/boards.md section 1 checks 1 to 6."""

from __future__ import annotations

import itertools
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow.state.events import DeadLetter, InvalidEvent
from rankflow.state.score_events import (
    ScoreResult,
    check_score,
    loads_json,
    parse_score,
    parse_score_records,
)
from rankflow.state.signatures import sign
from tests.boards_model import check as model_check
from tests.boards_model import signature as model_signature

KEY = bytes.fromhex("0123456789abcdef" * 4)
GOOD = {"game_id": "g1", "match_id": "m1", "player_id": "ana", "points": 50, "played_at": 1798884000000,
        "received_at": 1798884002000}
FIELDS = list(GOOD)


def signed(obj: dict, key: bytes = KEY) -> dict:
    return {**obj, "sig": sign(key, obj["game_id"], obj["match_id"], obj["player_id"], obj["points"],
                               obj["played_at"])}


def outcome(raw: bytes, key: bytes | None = None) -> str:
    """``"ok"`` or the reason, the same through the batch (fast) path, one-line path and the model."""
    one = parse_score(raw, "scores", 7, 3, key)
    events, dead = parse_score_records([raw], [7], "scores", 3, key)
    if isinstance(one, ScoreResult):
        assert events == [tuple(one)] and dead == [] and one.offset == 7 and one.raw is raw
        found = "ok"
    else:
        assert events == [] and dead == [("scores", one)]
        assert (one.partition, one.offset, one.raw, one.epoch) == ("scores", 7, raw, 3) and one.detail
        found = one.reason
    assert (model_check(raw, key)[0] or "ok") == found, "the model disagrees"
    return found


DROP = object()  # line(field=DROP): the field is absent


def line(key: bytes | None = None, **changes) -> bytes:
    """GOOD with ``changes``; signed under ``key`` (when the fields can be signed) unless ``sig`` is given."""
    obj = {**GOOD, **changes}
    if key is not None and "sig" not in changes:
        try:
            obj = signed(obj, key)
        except (KeyError, TypeError):
            obj = {**obj, "sig": signed(GOOD, key)["sig"]}
    return json.dumps({k: v for k, v in obj.items() if v is not DROP}, ensure_ascii=False).encode()


def test_a_valid_event_with_extra_fields():
    raw = line(extra={"x": [1, 2.5, None]}, sig=17)  # no key configured: sig is ignored, whatever it is
    assert parse_score(raw, "scores", 0, 1, None) == ScoreResult("g1", "m1", "ana", 50, 1798884000000,
                                                                 1798884002000, 0, raw)
    assert outcome(raw) == "ok"


# -- check 1 ------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b"", b"{", b"NaN", b"Infinity", b'{"points": NaN}', b'{"x": -Infinity}', b"\xff", b'{"x": "\xff"}',
    b'{"x": "\xed\xa0\xbc"}',  # a surrogate encoded in UTF-8 is not UTF-8
    b'{"x": "\\ud83c"}', b'{"x": "\\udfae"}', b'{"\\ud83c": 1}', b'["\\ud83c"]', b'{"x": "\\ud83c\\u0041"}',
    b'\xef\xbb\xbf{"x": 1}', b'{"x": 1,}', b'{"x": 01}', b"{'x': 1}", b'{"x": 1} 2', b'{"x": "\x01"}',
    "{\"x\": 1}".encode("utf-16"),
])
def test_invalid_json(raw):
    assert outcome(raw) == "invalid_json"


def test_invalid_json_with_all_fields_present():
    raw = line()[:-1] + b', "note": "\\ud83c"}'
    assert outcome(raw) == "invalid_json"
    assert outcome(line()[:-1] + b', "note": NaN}') == "invalid_json"


def test_a_paired_surrogate_escape_is_one_character():
    raw = line()[:-1] + b', "player_id": "\\ud83c\\udfae"}'
    assert outcome(raw) == "ok" and parse_score(raw, "s", 0, 1, None).player_id == "🎮"


# -- check 2 ------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [b"[]", b"3", b'"x"', b"null", b"true", b"[{}]", b"18446744073709551616"])
def test_not_an_object(raw):
    assert outcome(raw) == "not_an_object"


# -- checks 3 to 5 ---------------------------------------------------------------------

@pytest.mark.parametrize("field", FIELDS)
def test_missing_field(field):
    assert outcome(line(**{field: DROP})) == "missing_field"


@pytest.mark.parametrize("field,value", [
    *[(f, v) for f in ("game_id", "match_id", "player_id") for v in (None, 5, ["g"], {"g": 1}, True)],
    *[(f, v) for f in ("points", "played_at", "received_at") for v in (None, "5", 10.0, 1.5, True, False, [1])],
])
def test_wrong_type(field, value):
    assert outcome(line(**{field: value})) == "wrong_type"


@pytest.mark.parametrize("field", ["points", "played_at", "received_at"])
@pytest.mark.parametrize("literal", [b"10.0", b"1e3", b"1E3", b"1.0e+2", b"-0.0", b"1e400", b"-1e400", b"true"])
def test_numbers_with_a_fraction_or_exponent_are_not_integers(field, literal):
    raw = line(**{field: DROP})[:-1] + b', "%s": %s}' % (field.encode(), literal)
    assert outcome(raw) == "wrong_type"


@pytest.mark.parametrize("field,text", [
    ("game_id", '""'), ("match_id", '"%s"' % ("x" * 65)), ("player_id", '"%s"' % ("é" * 65)),
    ("player_id", '"%s"' % ("🎮" * 65)), ("player_id", '"%s"' % ("\\ud83c\\udfae" * 65)),
    ("points", "-1"), ("points", "10001"), ("played_at", "-1"), ("received_at", "253402300800000"),
    ("points", "18446744073709551616"), ("points", str(2**64 - 1)), ("played_at", str(-(2**63) - 1)),
    ("points", "9" * 5000), ("received_at", "-" + "1" * 401),
])
def test_out_of_range(field, text):
    raw = line()[:-1] + b', "%s": %s}' % (field.encode(), text.encode())
    assert outcome(raw) == "out_of_range"


@pytest.mark.parametrize("field,value", [
    ("game_id", "x"), ("match_id", "x" * 64), ("player_id", "é" * 64), ("player_id", "🎮" * 64),
    ("points", 0), ("points", 10000), ("played_at", 0), ("received_at", 253402300799999), ("points", -0),
])
def test_limits_are_inclusive(field, value):
    assert outcome(line(**{field: value})) == "ok"


def test_minus_zero_is_the_integer_zero():
    raw = line(points=DROP)[:-1] + b', "points": -0}'
    assert outcome(raw) == "ok" and parse_score(raw, "s", 0, 1, None).points == 0


def test_huge_integers_in_ignored_fields_are_fine():
    assert outcome(line()[:-1] + b', "x": 18446744073709551616, "y": ' + b"9" * 5000 + b', "z": 1e400}') == "ok"


def permutations_of(obj: dict) -> list[bytes]:
    """The same object with its fields in every order that moves the interesting ones around."""
    keys = list(obj)
    return [json.dumps({k: obj[k] for k in order}, ensure_ascii=False).encode()
            for order in itertools.islice(itertools.permutations(keys), 0, None, 37)] + [
        json.dumps({k: obj[k] for k in reversed(keys)}).encode()]


@pytest.mark.parametrize("obj,expected", [
    ({**GOOD, "points": "5", "game_id": DROP}, "missing_field"),  # missing + wrong type
    ({**GOOD, "received_at": None, "match_id": DROP}, "missing_field"),  # null is present, wrong type
    ({**GOOD, "game_id": "", "points": 5.5}, "wrong_type"),  # out of range + wrong type
    ({**GOOD, "player_id": 7, "played_at": -1}, "wrong_type"),
    ({**GOOD, "points": 18446744073709551616, "game_id": None}, "wrong_type"),  # big int is out of range, not wrong
    ({**GOOD, "match_id": "", "points": 10001, "played_at": DROP}, "missing_field"),
])
def test_each_check_looks_at_all_six_fields_first(obj, expected):
    obj = {k: v for k, v in obj.items() if v is not DROP}
    for raw in permutations_of(obj):
        assert outcome(raw) == expected, raw


def test_a_repeated_key_takes_its_last_value_on_every_path():
    assert outcome(line()[:-1] + b', "points": "5"}') == "wrong_type"
    assert outcome(b'{"points": "5", ' + line()[1:]) == "ok"


def test_null_present_is_wrong_type_not_missing():
    assert outcome(line(points=None)) == "wrong_type"
    assert outcome(line(points=DROP)) == "missing_field"


def test_details_name_the_fields():
    def detail(raw: bytes) -> str:
        return parse_score(raw, "s", 0, 1, None).detail

    assert detail(line(points=DROP, game_id=DROP)) == "game_id is missing; points is missing"
    assert detail(line(points=1.5)) == "points must be an integer"
    assert detail(line(game_id="")) == "game_id must be 1 to 64 characters long"
    assert detail(b"[]") == "expected a JSON object, got an array"


# -- check 6 ------------------------------------------------------------------------

def test_signed_event_accepted_with_a_key():
    assert outcome(line(KEY), KEY) == "ok"


@pytest.mark.parametrize("sig", [DROP, None, 5, ["x"], "", "é" * 64, "0" * 64, "🎮"])
def test_bad_signature(sig):
    assert outcome(line(KEY, sig=sig), KEY) == "bad_signature"


def test_signature_must_be_exactly_lowercase_hex():
    good = signed(GOOD)["sig"]
    assert outcome(line(KEY, sig=good.upper()), KEY) == "bad_signature"
    assert outcome(line(KEY, sig=good + "0"), KEY) == "bad_signature"
    assert outcome(line(KEY, sig=" " + good), KEY) == "bad_signature"
    assert outcome(line(KEY, sig=good), b"another key") == "bad_signature"


def test_signature_covers_points_and_played_at_not_received_at():
    forged = {**signed({**GOOD, "points": 90}), "points": 900}
    assert outcome(json.dumps(forged).encode(), KEY) == "bad_signature"
    moved = {**signed(GOOD), "played_at": GOOD["played_at"] + 1}
    assert outcome(json.dumps(moved).encode(), KEY) == "bad_signature"
    assert outcome(json.dumps({**signed(GOOD), "received_at": 5}).encode(), KEY) == "ok"


def test_ids_holding_separators_sign_differently():
    a = {**GOOD, "game_id": "g|1:m", "match_id": "x"}
    b = {**GOOD, "game_id": "g", "match_id": "1:m|x"}
    assert outcome(json.dumps(signed(a)).encode(), KEY) == "ok"
    assert outcome(json.dumps({**b, "sig": signed(a)["sig"]}).encode(), KEY) == "bad_signature"
    assert outcome(json.dumps(signed({**GOOD, "player_id": "é|🎮:"}), ensure_ascii=False).encode(), KEY) == "ok"


@settings(max_examples=200, deadline=None)
@given(key=st.binary(min_size=1, max_size=200), game=st.text(min_size=1, max_size=8), match=st.text(min_size=1, max_size=8),
       player=st.text(min_size=1, max_size=8), points=st.integers(0, 10000), played_at=st.integers(0, 253402300799999))
def test_the_kernels_signature_check_is_hmac_sha256(key, game, match, player, points, played_at):
    """The kernel's prepared HMAC (pads hashed once) accepts what the model signs, for every
    key length (keys longer than SHA-256's 64-byte block are hashed first, RFC 2104), and
    nothing signed for another result."""
    ids = {"game_id": game, "match_id": match, "player_id": player}
    if any(0xD800 <= ord(c) <= 0xDFFF for c in game + match + player):
        return  # not UTF-8: no result can hold it
    obj = {**ids, "points": points, "played_at": played_at, "received_at": 0,
           "sig": model_signature(key, game, match, player, points, played_at)}
    assert check_score(orjson.dumps(obj), key) == (game, match, player, points, played_at, 0)
    forged = orjson.dumps({**obj, "points": (points + 1) % 10001})
    assert model_check(forged, key)[0] == "bad_signature" == outcome(forged, key)


def test_earlier_checks_win_over_the_signature():
    assert outcome(line(KEY, sig=DROP, points=10001), KEY) == "out_of_range"
    assert outcome(line(KEY, sig="bad", points="5"), KEY) == "wrong_type"


def test_no_key_ignores_sig():
    assert outcome(line(sig="nonsense")) == "ok"


# -- the functions on their own ---------------------------------------------------------

def test_check_score_reads_big_integers_exactly():
    raw = line()[:-1] + b', "points": 18446744073709551616}'
    assert type(orjson.loads(raw)["points"]) is float  # what orjson would make of it: the kernel reads the literal
    with pytest.raises(InvalidEvent) as err:
        check_score(raw, None)
    assert err.value.reason == "out_of_range"
    raw = line()[:-1] + b', "points": 50.0}'
    with pytest.raises(InvalidEvent) as err:
        check_score(raw, None)
    assert err.value.reason == "wrong_type"


def test_loads_json_keeps_exact_integers_orjson_cannot_hold():
    assert loads_json(b'{"a": ' + b"9" * 400 + b"}")["a"] > 10**30


def test_batches_mix_fast_and_full_paths_in_order():
    forged = json.dumps({**signed(GOOD), "points": 7}).encode()
    lines = [line(KEY), b"{", line(KEY, points=1.0), line(KEY, game_id="🎮"), line(KEY, sig="x"), forged]
    events, dead = parse_score_records(lines, range(100, 106), "p3", 9, KEY)
    assert [e[6] for e in events] == [100, 103]
    assert [(p, d.reason, d.offset, d.epoch) for p, d in dead] == [
        ("p3", "invalid_json", 101, 9), ("p3", "wrong_type", 102, 9), ("p3", "bad_signature", 104, 9),
        ("p3", "bad_signature", 105, 9)]  # points changed after signing
    assert all(isinstance(d, DeadLetter) and d.raw == lines[d.offset - 100] for _, d in dead)
    assert events[1][:6] == ("🎮", "m1", "ana", 50, 1798884000000, 1798884002000)
    assert all(type(e) is tuple for e in events)


def test_dead_letter_json():
    dl = parse_score(b'{"game_id": "\xff"}', "scores.jsonl", 12, 1, None)
    assert orjson.loads(dl.to_json()) == {
        "reason": "invalid_json", "detail": dl.detail,
        "position": {"partition": "scores.jsonl", "offset": 12}, "raw": '{"game_id": "\\xff"}'}


# -- random lines: the batch path, the one-line path and the model agree -------------------------

# JSON texts of field values: mostly valid ones, so that later checks are reached, and any others
_GOOD = {"id": [json.dumps(s, ensure_ascii=False) for s in ("g", "é" * 64, "🎮" * 64, "a|1:b", "\\ud83c")],
         "int": ["0", "-0", "50", "10000", "253402300799999"]}
_ANY = ['""', json.dumps("🎮" * 65, ensure_ascii=False), json.dumps("x" * 65), '"\\ud83c"',  # a lone surrogate
        "-1", "10001", "253402300800000", "18446744073709551616", "9" * 500, "10.0", "1e3", "1e400", "true", "null",
        '"5"', "[]", "{}", "NaN"]


@st.composite
def lines(draw) -> bytes:
    """An object with the six fields (rarely one missing), mostly valid values, in any order, maybe signed."""
    fields = {}
    for f in FIELDS:
        kind = "id" if f.endswith("_id") else "int"
        fields[f] = draw(st.sampled_from(_GOOD[kind] if draw(st.integers(0, 3)) else _ANY))
    try:
        obj = json.loads("{" + ",".join(f'"{k}": {v}' for k, v in fields.items()) + "}")
        right = sign(KEY, *(obj[k] for k in FIELDS[:5]))
    except Exception:  # noqa: BLE001 - not signable: any sig will do
        right = "0" * 64
    fields["sig"] = draw(st.sampled_from([json.dumps(right), '"ab"', "7", None]))
    order = draw(st.permutations(list(fields)))
    missing = draw(st.sampled_from([None] * 30 + FIELDS))
    return ("{" + ", ".join(f'"{f}": {fields[f]}' for f in order if f != missing and fields[f] is not None)
            + "}").encode()


@settings(max_examples=400, deadline=None)
@given(lines(), st.booleans())
def test_random_lines_agree_with_the_model(raw, with_key):
    outcome(raw, KEY if with_key else None)


# -- any text: the kernel against the model, every reason and every field ----------------------

_JSON_ATOMS = st.one_of(
    st.sampled_from(['""', '"\\ud83c"', '"\\udfae\\ud83c"', '"\\ud83c\\udfae"', '"\\u0000"', '"a\\/\\b"', "-0", "0", "01",
                     "1.", "1e", "-", "1E+2", "NaN", "Infinity", "true", "fals", "null", "[]", "{}", "[1,]", "9" * 30,
                     '"\\x"', '"\x01"', "\ufeff", "\u00e9", "'a'"]),
    st.integers(-(10**20), 10**20).map(str),
    st.text(max_size=6).map(lambda t: json.dumps(t, ensure_ascii=False)),
)


@st.composite
def texts(draw) -> bytes:
    """An object whose members are the six fields and others, each any JSON-ish text: mostly
    valid, sometimes not JSON at all, sometimes not an object; or plain bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=40))
    names = draw(st.lists(st.sampled_from([*FIELDS, "sig", "x", "é"]), max_size=9))
    members = []
    for name in names:
        value = draw(st.one_of(_JSON_ATOMS, st.sampled_from([json.dumps(GOOD[name])] if name in GOOD else ['"s"'])))
        if draw(st.integers(0, 5)) == 0:
            value = "[" + value + "," + draw(_JSON_ATOMS) + "]"
        members.append(f'"{name}":{value}')
    text = "{" + draw(st.sampled_from([",", ", ", ",\n", " ,"])).join(members) + "}"
    if draw(st.integers(0, 7)) == 0:
        text = draw(st.sampled_from(["[" + text + "]", text + " ", " " + text, text[:-1], text + "}"]))
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=800, deadline=None)
@given(st.lists(texts(), min_size=1, max_size=5), st.sampled_from([None, KEY, b"k" * 100]))
def test_any_text_agrees_with_the_model(raws, key):
    """The kernel's batch path gives, for every record, the model's reason (or its fields)."""
    events, dead = parse_score_records(raws, range(len(raws)), "p", 1, key)
    found = {e[6]: e for e in events} | {d.offset: d for _, d in dead}
    assert sorted(found) == list(range(len(raws)))
    for i, raw in enumerate(raws):
        reason, obj = model_check(raw, key)
        if reason is None:
            assert found[i] == (*(obj[f] for f in FIELDS), i, raw)
        else:
            assert (found[i].reason, found[i].raw) == (reason, raw), raw
