"""``api.prepared``: which requests a route answers before ASGI, and with what (no server needed)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram

from rankflow.api.prepared import PreparedAnswers, PreparedRoute


class Metrics:
    def __init__(self) -> None:
        registry = CollectorRegistry()
        self.requests = Counter("r", "r", ["route", "status"], registry=registry)
        self.latency = Histogram("l", "l", ["route"], registry=registry)


def answers(ready: dict[str, Any]) -> tuple[PreparedAnswers, Metrics]:
    """A top route (``n``, default 10) and an item route (no query), answering from ``ready``."""
    metrics = Metrics()
    return PreparedAnswers(ready, routes(), {"/g/{game}/{board}/top": "/g/{game:game}/{board}/top"}, metrics), metrics


def routes() -> list[PreparedRoute]:
    """The routes of :func:`answers`: ``ready`` is the app state they answer from."""
    def top(state: Any, params: tuple[str, ...], n: int | None) -> bytes | None:
        if params[1] == "boom":
            raise ValueError("a usage error: the app answers it")
        return state.get(("top", *params, n))

    def item(state: Any, params: tuple[str, ...], _: int | None) -> bytes | None:
        return state.get(("item", *params))

    return [PreparedRoute("/g/{game}/{board}/top", "n", 10, top), PreparedRoute("/g/{game}/{board}/items/{item}",
                                                                               None, None, item)]


def test_ready_answers_and_everything_else_is_none():
    ready = {("top", "a", "all", 10): b"T10", ("top", "a", "all", 7): b"T7", ("item", "a", "all", "x"): b"X"}
    prepared, metrics = answers(ready)
    assert prepared.answer("/g/a/all/top", b"") == b"T10"
    assert prepared.answer("/g/a/all/top", b"n=7") == b"T7"
    assert prepared.answer("/g/a/all/top", b"n=0007") == b"T7"
    assert prepared.answer("/g/a/all/items/x", b"") == b"X"
    for path, query in [("/g/a/all/top", b"n=8"), ("/g/a/all/top", b"k=7"), ("/g/a/all/top", b"n=7&n=8"),
                        ("/g/a/all/top", b"n=x"), ("/g/a/all/top", b"n=12345"), ("/g/a/all/top/", b""),
                        ("/g/a//top", b""), ("/g/a%2Fb/all/top", b""), ("/g/a/all/items/x", b"n=1"),
                        ("/g/a/boom/top", b""), ("/h/a/all/top", b""), ("g/a/all/top", b""), ("/", b"")]:
        assert prepared.answer(path, query) is None, (path, query)
    assert prepared.answered == 4
    prepared.flush()  # plain counts until /metrics is read
    assert metrics.requests.labels("/g/{game:game}/{board}/top", "200")._value.get() == 3  # its FastAPI name
    assert metrics.requests.labels("/g/{game}/{board}/items/{item}", "200")._value.get() == 1


segment = st.one_of(st.sampled_from(["g", "top", "items", "boom", ""]), st.text(st.sampled_from("gab/%?="), max_size=4))
paths = st.one_of(  # near the routes (to answer, or not for one detail) and anything
    st.tuples(st.just("g"), segment, segment, st.sampled_from(["top", "items", "x"])).map(list),
    st.tuples(st.just("g"), segment, segment, st.sampled_from(["items", "top"]), segment).map(list),
    st.lists(segment, min_size=1, max_size=6))
queries = st.one_of(st.sampled_from([b"", b"n=7", b"n=0042", b"n=12345", b"k=7", b"n=", b"n=7&n=8"]),
                    st.binary(max_size=8))


@settings(deadline=None)  # a loaded machine (CI beside other work) must not fail it
@given(paths, queries)
def test_only_exact_segments_of_a_route_are_answered(parts, query):
    """Against a model: a path is answered iff it is a route's literal segments with one non-empty,
    slash-free segment per ``{name}``, and its query is empty or the route's ``name=digits`` (a path
    to decode never gets here: the protocol leaves it to the ASGI path)."""
    path = "/" + "/".join(parts)
    prepared, _ = answers({})
    prepared.state = _Everything()
    segs = path.split("/")[1:]
    ok_path = all(segs) and segs[0] == "g" and (
        (len(segs) == 4 and segs[3] == "top") or (len(segs) == 5 and segs[3] == "items"))
    is_top = ok_path and len(segs) == 4
    digits = query[2:]
    ok_query = query == b"" or (is_top and query.startswith(b"n=") and 1 <= len(digits) <= 4 and digits.isdigit()
                                and digits.isascii())
    expected = ok_path and ok_query and not (is_top and segs[2] == "boom")  # the top route raises for it
    assert (prepared.answer(path, query) is not None) == expected


class _Everything(dict):
    def get(self, key, default=None):  # type: ignore[override]
        return b"x"


def test_doctests():
    import doctest

    from rankflow.api import prepared

    result = doctest.testmod(prepared)
    assert result.attempted >= 1 and result.failed == 0


def test_a_reply_carries_the_validators_and_is_a_304_when_the_tag_matches():
    """``PreparedAnswers.reply``: the head after the server's default headers, the validators made
    once per target and snapshot (``api.http_cache``), a ``304`` without a body for a matching tag."""
    from rankflow.api.http_cache import HttpCache

    body = b'{"snapshot_id":7,"published_at":1000,"age_ms":3,"items":[]}'
    prepared = PreparedAnswers({("top", "a", "all", 10): body}, routes(),
                               {}, Metrics(), HttpCache(1, []))
    status, rest, sent = prepared.reply("/g/a/all/top", b"", None)
    assert status == b"HTTP/1.1 200 OK\r\n" and rest.endswith(b"\r\n\r\n")
    head = rest[:-4]
    assert sent == body
    lines = head.split(b"\r\n")
    assert lines[:2] == [b"content-length: %d" % len(body), b"content-type: application/json"]
    assert [line.split(b":")[0] for line in lines[2:]] == [b"etag", b"cache-control", b"last-modified"]
    tag = lines[2].split(b": ", 1)[1]
    assert tag.startswith(b'W/"7-1000-') and lines[3] == b"cache-control: public, max-age=1"
    assert lines[4] == b"last-modified: Thu, 01 Jan 1970 00:00:01 GMT"
    status, rest, sent = prepared.reply("/g/a/all/top", b"", b'"other", ' + tag)
    assert status == b"HTTP/1.1 304 Not Modified\r\n" and rest == head[head.index(b"etag"):] + b"\r\n\r\n"
    assert sent == b""
    assert prepared.reply("/g/a/all/top", b"", b'W/"7-1000-000000000000"')[0] == b"HTTP/1.1 200 OK\r\n"
    assert prepared.reply("/g/a/all/top", b"n=3", None) is None  # not ready: the app answers
