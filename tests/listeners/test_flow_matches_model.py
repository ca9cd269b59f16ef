"""Random logs with chaos through the real flow equal the reference model.

The logs come from a small universe (few users, playbacks, songs, versions) so that
duplicates, reorderings, superseded and conflicting events are frequent, mixed with
invalid lines and with the sweeper's ``TIMEOUT`` events (docs/semantics/listeners.md 6): copies of an
earlier event's playback fired around its deadline (idle, early, stale by the time they
arrive), and malformed ones. Tiny read chunks and a 1 ms barrier make the flow cut the log into
many epochs, and every published snapshot must equal the model at its positions.
"""

from __future__ import annotations

import json
import uuid

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankflow.connectors import changelog
from tests.model import model_of_lines, parse
from tests.events import ranking, recent, recent_window

USERS = [f"u{i}" for i in range(5)]
SONGS = ["s_a", "s_b", "s_c", "s_d", "é"]

valid_event = st.fixed_dictionaries({
    "user_id": st.sampled_from(USERS),
    "playback_id": st.sampled_from(["p1", "p2", "p3", "p4"]),
    "song_id": st.sampled_from(SONGS),
    "type": st.sampled_from(["START", "START", "STOP", "HEARTBEAT"]),
    "version": st.integers(0, 5),
    "ts": st.integers(0, 10**13),
}).map(orjson.dumps)

TIMER_IDLE_MS = st.one_of(st.integers(1, 100), st.integers(1, 10**12))

invalid_timer = st.fixed_dictionaries({
    "user_id": st.sampled_from(USERS), "playback_id": st.just("p1"), "song_id": st.sampled_from(SONGS),
    "type": st.just("TIMEOUT"), "version": st.integers(0, 5), "ts": st.integers(0, 10**13),
}, optional={"idle_ms": st.one_of(st.integers(-3, 0), st.booleans(), st.just("5"), st.just(1.5), st.none())}
).map(orjson.dumps)

invalid_line = st.one_of(
    invalid_timer,
    st.sampled_from([b"", b"{", b"[]", b"null", b'"x"', b"NaN", b"\xff\xfe"]),
    st.fixed_dictionaries({
        "user_id": st.one_of(st.sampled_from(USERS), st.just(""), st.integers()),
        "playback_id": st.sampled_from(["p1", "p" * 257]),
        "song_id": st.sampled_from(SONGS),
        "type": st.sampled_from(["START", "PLAY", "start"]),
        "version": st.one_of(st.integers(-2, 5), st.booleans(), st.floats(0, 3), st.just(2**70)),
        "ts": st.one_of(st.integers(-1, 5), st.just(None)),
    }).map(lambda d: json.dumps(d).encode()),  # stdlib: orjson refuses ints beyond 64 bits
)

SHARDS = st.sampled_from([0, 1, 2, 64])  # user stage keyed per user, or by shards of users



@st.composite
def with_timers(draw, lines: list[bytes], idle_ms: st.SearchStrategy[int] = TIMER_IDLE_MS) -> list[bytes]:
    """``lines`` with ``TIMEOUT`` events inserted after some valid events (or, once other
    timers went in before them, around them): each names that event's playback (so that
    it can match), with a ``ts`` around its deadline."""
    out = list(lines)
    valid = {i: obj for i, obj in enumerate(map(parse, lines)) if obj is not None}
    sources = [i for i in sorted(valid) if valid[i]["type"] == "START"] or sorted(valid)  # STARTs: timers that can fire
    for _ in range(draw(st.integers(0, len(sources) // 3 + 1)) if sources else 0):
        i = draw(st.sampled_from(sources))
        obj = valid[i]
        idle = draw(idle_ms)
        ts = max(0, obj["ts"] + idle + draw(st.sampled_from([-1, 0, 0, 1, idle, -idle, 10**4])))
        at = draw(st.integers(i + 1, len(out)))
        out.insert(at, json.dumps({**obj, "type": "TIMEOUT", "ts": ts, "idle_ms": idle}).encode())  # any version
    return out


def log_lines(min_size: int = 0) -> st.SearchStrategy[list[bytes]]:
    return st.lists(st.one_of(valid_event, valid_event, valid_event, invalid_line), min_size=min_size,
                    max_size=80).flatmap(with_timers)


def check_against_model(out: dict, lines: list[bytes], path: str, k_max: int, recent_minutes: int = 5) -> None:
    model = model_of_lines(lines)
    final = out["final"]
    if recent_minutes:
        assert recent(final) == model.recent_ranking(recent_minutes, k_max), "recent plays"
        assert recent_window(final) == model.recent_window(recent_minutes)
    else:
        assert "recent" not in final
    assert out["counts"] == {s: c for s, c in model.counts.items() if c > 0}, "the full count table"
    assert ranking(final) == model.ranking(k_max)
    assert final["total_listeners"] == model.total
    assert final["counted_users"] == model.counted_users
    assert final["dead_letters"] == model.dead_letters == len(out["dead_letters"])
    assert final["positions"] == {path: len(lines)}
    assert final["errors"] == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=log_lines(), partitions=st.integers(1, 5), k_max=st.integers(1, 6), shards=SHARDS)
def test_random_logs_equal_the_model(flow, lines, partitions, k_max, shards):
    path = flow.write_log(lines)
    out = flow.run(path, song_partitions=partitions, k_max=k_max, user_shards=shards)
    check_against_model(out, lines, path, k_max)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=log_lines(21), partitions=st.integers(1, 4), shards=SHARDS)
def test_every_snapshot_is_the_model_at_its_positions(flow, lines, partitions, shards):
    path = flow.write_log(lines)
    out = flow.run(path, song_partitions=partitions, k_max=10, barrier_ms=1, read_chunk_bytes=64,
                   user_shards=shards)
    check_against_model(out, lines, path, 10)
    previous_id, previous_pos = 0, 0
    for snap in out["history"]:
        pos = snap["positions"][path]
        prefix = model_of_lines(lines[:pos])
        assert ranking(snap) == prefix.ranking(10), f"snapshot at line {pos}"
        assert out["tables"][snap["snapshot_id"]] == prefix.counts, f"count table at line {pos}"
        assert snap["total_listeners"] == snap["counted_users"] == prefix.counted_users
        assert snap["dead_letters"] == prefix.dead_letters
        assert snap["snapshot_id"] > previous_id and pos >= previous_pos
        previous_id, previous_pos = snap["snapshot_id"], pos


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=log_lines(21), partitions=st.integers(1, 4), shards=SHARDS)
def test_every_snapshot_with_every_song_split_is_the_model_at_its_positions(flow, lines, partitions, shards):
    """Split songs' partials coming and going (a song's last listener leaving included):
    the ranking and the whole count table of every snapshot."""
    path = flow.write_log(lines)
    out = flow.run(path, song_partitions=partitions, k_max=10, barrier_ms=1, read_chunk_bytes=64,
                   user_shards=shards, hot_threshold=0, split_songs=SONGS, hot_salts=3)
    check_against_model(out, lines, path, 10)
    for snap in out["history"]:
        prefix = model_of_lines(lines[:snap["positions"][path]])
        assert ranking(snap) == prefix.ranking(10)
        assert out["tables"][snap["snapshot_id"]] == prefix.counts, "count table"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=log_lines(), cut=st.floats(0, 1), shards=st.sampled_from([0, 1, 3]), compact=st.booleans())
def test_random_logs_resumed_from_recovery_equal_the_model(flow, tmp_path, monkeypatch, lines, cut, shards,
                                                           compact):
    """A run stopped part-way and resumed from its recovery directory (user shards from
    their changelogs, turning generations over when ``compact``) ends where one run would."""
    monkeypatch.setattr(changelog, "COMPACT_MIN_BYTES", 0 if compact else 1 << 22)
    head = lines[:int(cut * len(lines))]
    recovery = tmp_path / f"recovery-{uuid.uuid4().hex[:8]}"
    path = flow.write_log(head, name=f"{recovery.name}.jsonl")
    common = dict(song_partitions=2, k_max=6, user_shards=shards, recovery_dir=str(recovery), barrier_ms=1,
                  read_chunk_bytes=64, dead_letter=f"jsonl:{recovery}.dead.jsonl")
    first = flow.run(path, **common)
    flow.write_log(lines, name=f"{recovery.name}.jsonl")  # the rest arrives
    out = flow.run(path, namespace=first["namespace"], **common)
    check_against_model(out, lines, path, 6)


# Recent plays (docs/semantics/windows.md 7): a clock that moves a few seconds per event, each event's
# ts around it (up to 90 s late), so that starts enter, wait in and leave windows of one
# to a few minutes, and some arrive already before the window.
@st.composite
def recent_event(draw, clock: int) -> bytes:
    """Mostly consistent playbacks (a playback keeps its song and version, so repeated,
    late, superseded and stopped-first STARTs are frequent), sometimes a conflicting one."""
    n = draw(st.integers(1, 4))
    consistent = draw(st.integers(0, 5)) > 0
    return orjson.dumps({
        "user_id": draw(st.sampled_from(USERS)),
        "playback_id": f"p{n}",
        "song_id": SONGS[n % len(SONGS)] if consistent else draw(st.sampled_from(SONGS)),
        "type": draw(st.sampled_from(["START", "START", "START", "STOP", "HEARTBEAT"])),
        "version": n if consistent else draw(st.integers(0, 5)),
        "ts": max(0, clock + draw(st.integers(-90_000, 5_000))),
    })


@st.composite
def recent_lines(draw, min_size: int = 0) -> list[bytes]:
    lines, clock = [], 0
    for _ in range(draw(st.integers(min_size, 80))):
        clock += draw(st.integers(0, 15_000))
        lines.append(draw(st.one_of(recent_event(clock), recent_event(clock), recent_event(clock), invalid_line)))
    return draw(with_timers(lines, st.sampled_from([15_000, 45_000, 90_000])))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=recent_lines(), partitions=st.integers(1, 4), k_max=st.integers(1, 6), shards=SHARDS,
       minutes=st.integers(0, 4))
def test_random_logs_recent_plays_equal_the_model(flow, lines, partitions, k_max, shards, minutes):
    path = flow.write_log(lines)
    out = flow.run(path, song_partitions=partitions, k_max=k_max, user_shards=shards, recent_minutes=minutes)
    check_against_model(out, lines, path, k_max, minutes)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=recent_lines(20), partitions=st.integers(1, 4), shards=SHARDS,
       minutes=st.integers(1, 3), split=st.booleans())
def test_every_snapshot_has_the_models_recent_plays_at_its_positions(flow, lines, partitions, shards, minutes, split):
    """Many small epochs (and every song split into partials, or not): each snapshot's recent
    plays and window are the model's at its positions."""
    path = flow.write_log(lines)
    extra = dict(hot_threshold=0, split_songs=SONGS, hot_salts=3) if split else {}
    out = flow.run(path, song_partitions=partitions, k_max=10, barrier_ms=1, read_chunk_bytes=64,
                   user_shards=shards, recent_minutes=minutes, **extra)
    check_against_model(out, lines, path, 10, minutes)
    for snap in out["history"]:
        prefix = model_of_lines(lines[:snap["positions"][path]])
        assert recent(snap) == prefix.recent_ranking(minutes, 10), f"at line {snap['positions'][path]}"
        assert recent_window(snap) == prefix.recent_window(minutes)
        assert ranking(snap) == prefix.ranking(10)
