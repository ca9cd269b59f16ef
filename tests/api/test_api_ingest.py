"""What ingest hands to Kafka and what it refuses, against a real broker: each event as the
bytes the client posted (never re-encoded), judged by the flow's own check so that ingest
and flow never disagree (a hypothesis test), deep nesting never a 500, only
``application/json`` bodies, and match ids of any characters (``/`` too)."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import orjson
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings, strategies as st

from rankflow.api.app import Settings, create_app
from rankflow.api.ingest import check_events
from rankflow.api.match_results import check_results
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic
from rankflow.state.events import parse_records
from rankflow.state.json_spans import WHITESPACE
from rankflow.state.score_events import parse_score_records
from tests.kafka_helpers import read_topic
from tests.api.test_ingest import JSON

EVENT = b'{"user_id": "u1", "playback_id": "p1", "song_id": "s", "type": "START", "version": 1, "ts": 5'
"""An event's text without its closing brace: the tests add members."""


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def flow_accepts(raw: bytes) -> bool:
    """The listener flow's verdict on one Kafka message (its hot path and all)."""
    events, dead = parse_records([raw], range(1), "p", 1)
    return len(events) == 1


def score_flow_accepts(raw: bytes, key: bytes | None = None) -> bool:
    events, dead = parse_score_records([raw], range(1), "p", 1, key)
    return len(events) == 1


@pytest.fixture
def ingest(kafka_brokers, topic):
    ensure_topic(kafka_brokers, topic, 1)
    scores = topic + "-scores"
    ensure_topic(kafka_brokers, scores, 1)
    app = create_app(Settings(kafka=KafkaEndpoint(kafka_brokers, topic), score_kafka=KafkaEndpoint(kafka_brokers, scores)))
    with TestClient(app, headers=JSON) as c:
        yield c, topic, scores


def test_events_reach_kafka_as_the_bytes_posted(ingest, kafka_brokers):
    client, topic, _ = ingest
    singles = [
        EVENT + b', "extra": 18446744073709551617}',  # orjson would write 1.8446744073709552e+19
        EVENT + b', "deep": ' + nested(254) + b'}',  # orjson cannot write it again (a 500 once)
        EVENT.replace(b'"version": 1', b'"version": 18446744073709551617') + b'}',  # valid for the flow
        EVENT + b', "x": 1.50, "y": "\\u00e9"}',
    ]
    for body in singles:
        assert flow_accepts(body)
        r = client.post("/events", content=body)
        assert r.status_code == 202, (body[-60:], r.text)
    items = [EVENT.replace(b"u1", b"u%d" % i) + b', "n": %d}' % (10**20 + i) for i in range(3)]
    r = client.post("/events", content=b"[ " + b" ,\n".join(items) + b"\t]")
    assert r.status_code == 202 and r.json()["accepted"] == 3, r.text
    assert sorted(value for _, value in read_topic(kafka_brokers, topic)) == sorted(singles + items)


def test_deep_results_reach_kafka_as_posted_with_their_stamps(ingest, kafka_brokers):
    client, _, scores = ingest
    played = time.time_ns() // 1_000_000 - 1000
    members = [b'"game_id": "g1"', b'"player_id": "ana"', b'"points": 5', b'"played_at": %d' % played,
               b'"deep": ' + nested(1000), b'"n": %d' % 10**20]
    r = client.post("/matches/m1/result", content=b"{" + b", ".join(members) + b"}")
    assert r.status_code == 202, r.text
    r = client.post("/matches/m2/result", content=b"{" + b", ".join(members[:2] + [b'"received_at": 3'] + members[2:]) + b"}")
    assert r.status_code == 202, r.text
    [(key, value), (_, value2)] = read_topic(kafka_brokers, scores)
    stamp = orjson.loads(value)["received_at"]
    assert key == b"ana" and value == b"{" + b", ".join(members) + b',"match_id":"m1","received_at":%d}' % stamp
    stamp = orjson.loads(value2)["received_at"]
    assert value2 == b"{" + b",".join(members) + b',"match_id":"m2","received_at":%d}' % stamp, \
        "the body's received_at replaced, every other member as written"
    assert score_flow_accepts(value) and score_flow_accepts(value2)


def test_nesting_beyond_the_flows_reach_is_invalid_json_never_a_500(ingest, kafka_brokers):
    client, topic, scores = ingest
    too_deep = EVENT + b', "deep": ' + nested(1100) + b'}'
    assert not flow_accepts(too_deep)
    r = client.post("/events", content=too_deep)
    assert (r.status_code, r.json()["invalid"][0]["reason"]) == (400, "invalid_json"), r.text
    r = client.post("/events", content=b"[" + too_deep + b"]")
    assert (r.status_code, r.json()["invalid"][0]["reason"]) == (400, "invalid_json"), r.text
    # orjson reads it, but the standard library's json (the exact reading of a big version) would not
    exact_path = EVENT.replace(b'"version": 1', b'"version": 18446744073709551617') + b', "d": ' + nested(1000) + b"}"
    assert flow_accepts(exact_path)
    assert client.post("/events", content=exact_path).status_code == 202
    played = time.time_ns() // 1_000_000
    result = b'{"game_id": "g1", "player_id": "ana", "points": 5, "played_at": %d, "deep": %s}' % (played, nested(1100))
    r = client.post("/matches/m1/result", content=result)
    assert (r.status_code, r.json()["reason"], r.json()["index"]) == (400, "invalid_json", None), r.text
    assert [v for _, v in read_topic(kafka_brokers, topic)] == [exact_path]
    assert read_topic(kafka_brokers, scores) == []


# -- ingest accepts an event exactly when the flow does ----------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                       max_leaves=8)
_valid_fields = {
    "user_id": st.sampled_from(["u1", "é🎮", "x" * 256]), "playback_id": st.sampled_from(["p1", "p/2"]),
    "song_id": st.sampled_from(["s", "song a"]), "type": st.sampled_from(["START", "STOP", "HEARTBEAT", "TIMEOUT"]),
    "version": st.one_of(st.integers(0, 2**63), st.integers(2**64, 2**70)), "ts": st.integers(0, 2**70),
    "idle_ms": st.integers(1, 2**65),
}
_other_values = st.one_of(_values, st.sampled_from(["", "x" * 257, "PAUSE", -1, 0, 1.0, True, 2.5]))


def fields(draw: st.DrawFn, valid: dict[str, st.SearchStrategy]) -> dict:
    """Each field valid five times in six, else anything or absent: a third of the
    objects are valid, the others fail in any way the rules look at."""
    out = {}
    for name, values in valid.items():
        choice = draw(st.integers(0, 11))
        if choice < 10:
            out[name] = draw(values)
        elif choice == 10:
            out[name] = draw(_other_values)
    out.update(draw(st.dictionaries(st.text(max_size=4), _values, max_size=2)))  # extra fields, ignored
    return out


@st.composite
def event_texts(draw: st.DrawFn) -> bytes:
    """An event's JSON text, valid or not in every way the rules look at, written with
    whatever spacing; now and then not an object, or not JSON at all."""
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
    value = fields(draw, _valid_fields) if draw(st.integers(0, 9)) else draw(_values)
    text = json.dumps(value, separators=separators, ensure_ascii=draw(st.booleans())).encode()
    if draw(st.integers(0, 19)) == 0:
        text = text[:draw(st.integers(0, len(text)))]  # cut: mostly not JSON
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event_texts(), min_size=1, max_size=4), st.booleans(), st.sampled_from([b"", b" ", b"\n\t "]))
def test_ingest_accepts_an_event_exactly_when_the_flow_does(texts, as_array, space):
    as_array = as_array or len(texts) > 1 or texts[0].lstrip(WHITESPACE)[:1] == b"["  # an array is a batch
    body = (b"[" + space + (b"," + space).join(texts) + space + b"]") if as_array else texts[0]
    records, problems = check_events(space + body + space)
    verdicts = [flow_accepts(text) for text in texts]
    if not all(text.strip(WHITESPACE) for text in texts):
        assert problems, "an empty item, or an empty body, is refused"
        return
    assert (not problems) == all(verdicts), (texts, problems)
    if not problems:
        assert [value for _, value in records] == [text.strip(WHITESPACE) for text in texts], "each as posted"
    elif all(is_json(text) for text in texts):  # else a cut item may end elsewhere: only the refusal is sure
        bad = {p["index"] for p in problems}
        assert bad == {i for i, ok in enumerate(verdicts) if not ok}, problems


def is_json(text: bytes) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


_valid_result = {"game_id": st.sampled_from(["g1", "é🎮"]), "player_id": st.sampled_from(["ana", "b|o"]),
                 "points": st.integers(0, 10000), "played_at": st.integers(0, 1_700_000_000_000),
                 "match_id": st.just("m1"), "received_at": st.integers(0, 2**70), "sig": st.text(max_size=3)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_a_result_is_accepted_exactly_when_the_flow_accepts_it_stamped(data, separators):
    result = data.draw(st.composite(lambda draw: fields(draw, _valid_result))())
    now = time.time_ns() // 1_000_000
    text = json.dumps(result, separators=separators).encode()
    records, refusal = check_results(text, "m1", None, now)
    stamped = {**result, "match_id": "m1", "received_at": now}
    if refusal is None:
        [(key, value)] = records
        assert score_flow_accepts(value) and json.loads(value) == stamped
        assert key == result["player_id"].encode()
        if "received_at" not in result:
            assert value.startswith(text[:-1]), "the result as posted, the stamps at its end"
    elif refusal["reason"] not in ("match_id_mismatch", "in_future"):
        assert not score_flow_accepts(json.dumps(stamped).encode()), refusal


# -- only application/json -------------------------------------------------------------------

def test_ingest_takes_application_json_only(ingest, kafka_brokers):
    client, topic, scores = ingest
    event = EVENT + b"}"
    result = orjson.dumps({"game_id": "g1", "player_id": "ana", "points": 5, "played_at": 1})
    for route, body in (("/events", event), ("/matches/m1/result", result)):
        for refused in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                        "application/json; charset=latin-1", "application/jsonp", ""):
            r = client.post(route, content=body, headers={"Content-Type": refused})
            assert r.status_code == 415 and "application/json" in r.json()["error"], (route, refused, r.text)
        request = client.build_request("POST", route, content=body)
        del request.headers["Content-Type"]  # none at all
        r = client.send(request)
        assert r.status_code == 415, r.text
        for accepted in ("application/json; charset=utf-8", "Application/JSON", 'application/json;charset="UTF-8"',
                         "application/json ; charset = utf-8"):
            r = client.post(route, content=body, headers={"Content-Type": accepted})
            assert r.status_code == 202, (route, accepted, r.text)
    assert len(read_topic(kafka_brokers, topic)) == 4 and len(read_topic(kafka_brokers, scores)) == 4


# -- match ids of any characters ---------------------------------------------------------------

def test_match_ids_of_any_characters_can_be_posted(ingest, kafka_brokers):
    client, _, scores = ingest
    played = time.time_ns() // 1_000_000
    ids = {"a/b": "a/b", "a%2Fb": "a/b", "x/result": "x/result", quote("é🎮 ?#"): "é🎮 ?#", "m" * 64: "m" * 64,
           quote("é" * 64): "é" * 64, "%2F": "/"}
    for n, path in enumerate(ids):
        result = {"game_id": "g1", "player_id": f"p{n}", "points": 5, "played_at": played}
        r = client.post(f"/matches/{path}/result", content=orjson.dumps(result))
        assert r.status_code == 202, (path, r.text)
    for too_long in ("m" * 65, quote("é" * 65)):
        r = client.post(f"/matches/{too_long}/result", content=orjson.dumps(
            {"game_id": "g1", "player_id": "ana", "points": 5, "played_at": played}))
        assert (r.status_code, r.json()["reason"]) == (400, "out_of_range") and "match_id" in r.json()["detail"]
    r = client.post("/matches//result", content=orjson.dumps({"game_id": "g1", "player_id": "ana", "points": 5,
                                                              "played_at": played}))
    assert (r.status_code, r.json()["reason"]) == (400, "out_of_range"), "an empty id is one too short"
    got = {json.loads(value)["player_id"]: json.loads(value)["match_id"] for _, value in read_topic(kafka_brokers, scores)}
    assert got == {f"p{n}": match for n, match in enumerate(ids.values())}


def at_stack_depth(frames: int, call):
    """``call()`` from ``frames`` Python frames deeper: as from inside the HTTP service."""
    return call() if frames == 0 else at_stack_depth(frames - 1, call)


def test_the_exact_readings_verdict_does_not_depend_on_the_callers_stack():
    """A number only the standard library reads (``1e400``, beyond a double) or an integer
    orjson rounds, beside deep nesting: accepted up to orjson's depth (1024), refused
    beyond it, by the flows and by ingest, however deep the caller's stack is."""
    now = time.time_ns() // 1_000_000
    for depth, accepted in ((900, True), (1023, True), (1024, False)):  # the object adds one level
        result = b'{"game_id": "g1", "player_id": "ana", "points": 5, "played_at": 1, "x": 1e400, "d": %s' % (
            nested(depth))
        event = EVENT.replace(b'"version": 1', b'"version": 18446744073709551617') + b', "d": ' + nested(depth)
        for frames in (0, 300, 600):
            stamped = result + b', "match_id": "m1", "received_at": %d}' % now
            assert at_stack_depth(frames, lambda: score_flow_accepts(stamped)) == accepted, (depth, frames)  # noqa: B023 - called at once
            records, refusal = at_stack_depth(frames, lambda: check_results(result + b"}", "m1", None, now))  # noqa: B023 - called at once
            assert (refusal is None) == accepted, (depth, frames, refusal)
            if depth < 1024:  # orjson reads the event; its version is read exactly
                assert at_stack_depth(frames, lambda: flow_accepts(event + b"}")), (depth, frames)  # noqa: B023 - called at once
                assert not at_stack_depth(frames, lambda: check_events(event + b"}"))[1], (depth, frames)  # noqa: B023 - called at once
