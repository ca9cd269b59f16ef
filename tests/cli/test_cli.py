"""The ``rankflow`` console script as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import orjson
import pytest
import redis

from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.produce import append_steady
from rankflow.services import LocalRedis, free_port

from tests.model import model_of_lines, parse, read_lines

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_generate_is_reproducible(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    for path, seed in ((a, "3"), (b, "3"), (c, "4")):
        r = cli("generate", "--users", "50", "--songs", "20", "--events", "2000", "--seed", seed, "--out", str(path))
        assert r.returncode == 0, r.stderr
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    lines = read_lines(str(a))
    assert len(lines) == 2000
    model = model_of_lines(lines)
    assert model.dead_letters > 0 and model.conflicts > 0, "the log should carry invalid events"
    types = {ev["type"] for ev in map(parse, lines) if ev is not None}
    assert types == {"START", "STOP", "HEARTBEAT"}, "no timers unless asked for"


def test_generate_with_the_sweepers_timers(tmp_path):
    """``--timeouts RATE``: what the sweeper of docs/semantics/listeners.md 6 writes, mixed into the log;
    the same seed without it gives the log it always gave."""
    plain, timed = tmp_path / "plain.jsonl", tmp_path / "timed.jsonl"
    common = ["generate", "--users", "100", "--songs", "20", "--events", "4000", "--seed", "5"]
    assert cli(*common, "--out", str(plain)).returncode == 0
    r = cli(*common, "--timeouts", "0.05", "--idle-ms", "1000", "--out", str(timed))
    assert r.returncode == 0, r.stderr
    assert plain.read_bytes() != timed.read_bytes()
    events = [ev for ev in map(parse, read_lines(str(timed))) if ev is not None]
    timers = [ev for ev in events if ev["type"] == "TIMEOUT"]
    assert len(timers) > 100 and {ev["idle_ms"] for ev in timers} == {1000}
    model = model_of_lines(read_lines(str(timed)))
    assert 0 < model.timed_out < len(timers), "some fire, some lose their race"
    r = cli(*common, "--timeouts", "2", "--out", str(timed))
    assert r.returncode == 2 and "--timeouts: must be 0 to 1" in r.stderr


def test_run_then_top(tmp_path, redis_url, namespace):
    log = tmp_path / "events.jsonl"
    dead = tmp_path / "dead.jsonl"
    cli("generate", "--users", "200", "--songs", "30", "--events", "5000", "--seed", "1", "--out", str(log))
    r = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
            "--dead-letter", f"jsonl:{dead}", "--song-partitions", "4", "--k-max", "20")
    assert r.returncode == 0, r.stderr
    model = model_of_lines(read_lines(str(log)))
    assert len(dead.read_bytes().splitlines()) == model.dead_letters

    r = cli("top", "--k", "5", "--json", "--namespace", namespace, env={"RANKFLOW_REDIS_URL": redis_url})
    assert r.returncode == 0, r.stderr
    view = orjson.loads(r.stdout)
    assert set(view) == {"snapshot_id", "positions", "published_at", "total_listeners", "counted_users",
                         "stale", "age_ms", "items"}
    assert view["stale"] is False
    assert [(i["song_id"], i["listeners"]) for i in view["items"]] == model.ranking(5)
    assert [i["rank"] for i in view["items"]] == [1, 2, 3, 4, 5]
    assert view["positions"] == {str(log): 5000}
    assert view["total_listeners"] == view["counted_users"] == model.counted_users

    r = cli("top", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 0 and model.ranking(1)[0][0] in r.stdout

    for bad in ("0", "21"):
        r = cli("top", "--k", bad, "--redis", redis_url, "--namespace", namespace)
        assert r.returncode == 2 and "between 1 and K_max (20)" in r.stderr


def test_a_new_run_replaces_the_ranking_of_a_longer_earlier_log(tmp_path, redis_url, namespace):
    from tests.events import ev

    log, dead = tmp_path / "events.jsonl", f"jsonl:{tmp_path / 'dl.jsonl'}"
    log.write_bytes(b"".join(ev(f"u{i}", f"p{i}", "song_old", "START", 1) + b"\n" for i in range(20)))
    assert cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
               "--dead-letter", dead).returncode == 0
    log.write_bytes(ev("u1", "p1", "song_new", "START", 1) + b"\n")  # a new, shorter log at the same path
    assert cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
               "--dead-letter", dead).returncode == 0
    view = orjson.loads(cli("top", "--json", "--redis", redis_url, "--namespace", namespace).stdout)
    assert [(i["song_id"], i["listeners"]) for i in view["items"]] == [("song_new", 1)]
    assert view["positions"] == {str(log): 1}


def test_clear_errors(tmp_path, redis_url, namespace):
    r = cli("top", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 1 and "no usable ranking" in r.stderr
    r = cli("run", "--input", f"jsonl:{tmp_path / 'missing.jsonl'}", "--until-eof", "--redis", redis_url)
    assert r.returncode == 2 and "input file not found" in r.stderr
    r = cli("run", "--input", "nonsense", "--redis", redis_url)
    assert r.returncode == 2 and "KIND:TARGET" in r.stderr
    log = tmp_path / "e.jsonl"
    log.write_text("")
    r = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", "redis://127.0.0.1:1/0")
    assert r.returncode == 1 and "cannot reach Redis" in r.stderr
    r = cli("top", "--redis", "redis://127.0.0.1:1/0")
    assert r.returncode == 1 and "cannot reach Redis" in r.stderr


def test_empty_input_publishes_an_empty_ranking(tmp_path, redis_url, namespace):
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    r = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
            "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}")
    assert r.returncode == 0, r.stderr
    r = cli("top", "--json", "--redis", redis_url, "--namespace", namespace)
    view = orjson.loads(r.stdout)
    assert view["items"] == [] and view["positions"] == {str(log): 0}


def test_follow_mode_publishes_appended_events_and_stops_on_ctrl_c(tmp_path, redis_client, redis_url, namespace):
    import signal
    import time

    from rankflow.connectors.redis_read import read_latest
    from tests.events import ev

    log = tmp_path / "live.jsonl"
    log.write_bytes(ev("u1", "p1", "song_a", "START", 1) + b"\n")
    proc = subprocess.Popen([*RANKFLOW, "run", "--input", f"jsonl:{log}", "--redis", redis_url,
                             "--namespace", namespace, "--barrier-ms", "50",
                             "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for(position: int) -> dict:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            snap = read_latest(redis_client, namespace)
            if snap and snap["positions"].get(str(log)) == position:
                return snap
            time.sleep(0.05)
        proc.kill()
        raise AssertionError(f"no snapshot at position {position}: {proc.communicate()}")

    try:
        assert wait_for(1)["items"][0]["song_id"] == "song_a"
        with open(log, "ab") as f:
            f.write(ev("u2", "p2", "song_b", "START", 1) + b"\n" + ev("u3", "p3", "song_b", "START", 1))
            f.flush()  # the last line has no newline yet: it must wait for one
            time.sleep(0.5)
            assert wait_for(2)["total_listeners"] == 2
            f.write(b"\n")
        snap = wait_for(3)
        assert [(i["song_id"], i["listeners"]) for i in snap["items"]] == [("song_b", 2), ("song_a", 1)]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err


def test_top_serves_the_last_ranking_marked_stale_when_redis_has_none(tmp_path, redis_client, redis_url, namespace):
    from tests.events import ev

    log = tmp_path / "e.jsonl"
    log.write_bytes(ev("u1", "p1", "song_a", "START", 1) + b"\n")
    assert cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
               "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}").returncode == 0
    fresh = orjson.loads(cli("top", "--json", "--redis", redis_url, "--namespace", namespace).stdout)
    assert fresh["stale"] is False
    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost its data
    r = cli("top", "--json", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 1 and "no usable ranking" in r.stderr and "stale" in r.stderr
    stale = orjson.loads(r.stdout)
    assert stale["stale"] is True and stale["age_ms"] >= 0
    assert stale["items"] == fresh["items"] and stale["snapshot_id"] == fresh["snapshot_id"]
    r = cli("top", "--redis", "redis://127.0.0.1:1/0", "--namespace", namespace)  # another Redis, unreachable
    assert r.returncode == 1 and "no earlier ranking cached" in r.stderr and r.stdout == ""


def _publish_one_song(tmp_path, url: str, namespace: str, song: str) -> None:
    from tests.events import ev

    log = tmp_path / f"{song}.jsonl"
    log.write_bytes(ev("u1", "p1", song, "START", 1) + b"\n")
    r = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", url, "--namespace", namespace,
            "--dead-letter", f"jsonl:{tmp_path / (song + '-dl.jsonl')}")
    assert r.returncode == 0, r.stderr


def test_top_never_shows_the_ranking_of_another_redis(tmp_path, redis_url, namespace):
    """The offline cache is keyed by the Redis (host, port, db) and the namespace: with
    a Redis down, `top` shows that Redis's last ranking, never one read from another."""
    other = LocalRedis(free_port(), tmp_path / "other-redis").start()
    try:
        _publish_one_song(tmp_path, redis_url, namespace, "song_here")
        _publish_one_song(tmp_path, other.url, namespace, "song_there")
        for url, song in ((redis_url, "song_here"), (other.url, "song_there")):
            view = orjson.loads(cli("top", "--json", "--redis", url, "--namespace", namespace).stdout)
            assert view["stale"] is False and [i["song_id"] for i in view["items"]] == [song]
        r = cli("top", "--json", "--redis", redis_url.removesuffix("/0") + "/1", "--namespace", namespace)
        assert r.returncode == 1 and "no earlier ranking cached" in r.stderr, "another db of the same server"
    finally:
        other.stop()
    r = cli("top", "--json", "--redis", other.url, "--namespace", namespace)  # down: its own last ranking
    assert r.returncode == 1 and "cannot reach Redis" in r.stderr
    stale = orjson.loads(r.stdout)
    assert stale["stale"] is True and [i["song_id"] for i in stale["items"]] == ["song_there"]
    with_password = other.url.replace("redis://", "redis://reader:pw@")  # the same server, spelt another way
    r = cli("top", "--json", "--redis", with_password, "--namespace", namespace)
    assert r.returncode == 1 and [i["song_id"] for i in orjson.loads(r.stdout)["items"]] == ["song_there"]
    r = cli("top", "--json", "--redis", "redis://127.0.0.1:1/0", "--namespace", namespace)
    assert r.returncode == 1 and "no earlier ranking cached" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("ns", ["../../escaped", "a/b", "..", "TMP/escaped"])
def test_a_namespace_never_becomes_a_cache_path(tmp_path, redis_url, namespace, ns):
    """`top` caches its last ranking in one file named by a hash, whatever the namespace holds."""
    ns = ns.replace("escaped", namespace).replace("TMP", str(tmp_path))  # an absolute path, inside tmp_path
    _publish_one_song(tmp_path, redis_url, ns, "song_a")
    r = cli("top", "--json", "--redis", redis_url, "--namespace", ns)
    assert r.returncode == 0, r.stderr
    cache = tmp_path / "cache" / "rankflow"
    assert [p.parent for p in cache.rglob("*")] == [cache], "one file, directly in the cache directory"
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("**/escaped*"))
    r = cli("top", "--json", "--redis", redis_url, "--namespace", ns)
    assert r.returncode == 0 and orjson.loads(r.stdout)["items"][0]["song_id"] == "song_a"


def test_a_followed_file_fed_at_a_steady_rate_then_ctrl_c(tmp_path, redis_url, namespace):
    """Follow mode (no --until-eof): lines appended while the run is live are counted,
    every snapshot is the model at its position, and Ctrl-C publishes the last barrier."""
    log = tmp_path / "live.jsonl"
    log.touch()
    proc = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input", f"jsonl:{log}",
                             "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "50",
                             "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 60
        while read_latest(client, namespace) is None:  # live: it publishes the empty file's ranking
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
            time.sleep(0.05)
        append_steady(str(log), rate=2000, users=200, songs=30, seed=2, count=3000)
        while (read_latest(client, namespace) or {}).get("positions", {}).get(str(log), 0) < 3000:
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not catch up"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    lines = read_lines(str(log))
    assert len(lines) == 3000
    history = read_history(client, namespace)
    assert len(history) >= 3, "snapshots while the file grew"
    for snap in history:
        prefix = model_of_lines(lines[:snap["positions"][str(log)]])
        assert [(i["song_id"], i["listeners"]) for i in snap["items"]] == prefix.ranking(100)
    client.close()


@pytest.mark.parametrize("command", [["run", "--input", "jsonl:{log}", "--until-eof"], ["top"],
                                     ["status", "--input", "jsonl:{log}"]])
def test_redis_passwords_are_never_printed(tmp_path, command):
    log = tmp_path / "e.jsonl"
    log.write_text("")
    url = "redis://reader:s3cr3t-pw@127.0.0.1:1/0"
    r = subprocess.run([sys.executable, "-m", "rankflow.cli", *[c.format(log=log) for c in command], "--redis", url,
                        "--namespace", f"ns-{tmp_path.name}"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "HOME": str(tmp_path)})
    assert r.returncode == 1
    assert "s3cr3t-pw" not in r.stdout + r.stderr
    assert "redis://reader:***@127.0.0.1:1/0" in r.stderr


def test_top_recent(tmp_path, redis_url, namespace):
    from tests.events import ev

    log = tmp_path / "e.jsonl"
    lines = [ev("u1", "p1", "song_a", "START", 1, 60_000), ev("u2", "p1", "song_b", "START", 1, 61_000),
             ev("u3", "p1", "song_b", "START", 1, 62_000), ev("u3", "p1", "song_b", "STOP", 1, 63_000),
             ev("u4", "p1", "song_c", "START", 1, 1_000)]  # bucket 0: before the 1-minute window
    log.write_bytes(b"".join(line + b"\n" for line in lines))
    r = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
            "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}", "--recent-minutes", "1", "--k-max", "5")
    assert r.returncode == 0, r.stderr
    r = cli("top", "--recent", "--k", "1", "--json", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 0, r.stderr
    view = orjson.loads(r.stdout)
    assert set(view) == {"snapshot_id", "positions", "published_at", "stale", "age_ms", "window_start", "window_end",
                         "watermark", "items"}
    assert view["items"] == [{"rank": 1, "song_id": "song_b", "plays": 2}]
    assert (view["window_start"], view["window_end"], view["watermark"]) == (60_000, 120_000, 63_000)
    assert view["positions"] == {str(log): 5} and view["stale"] is False
    listeners = orjson.loads(cli("top", "--json", "--k", "5", "--redis", redis_url, "--namespace", namespace).stdout)
    assert listeners["snapshot_id"] == view["snapshot_id"], "one snapshot"
    assert [i["song_id"] for i in listeners["items"]] == ["song_c", "song_b", "song_a"]

    r = cli("top", "--recent", "--k", "5", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 0 and "plays" in r.stdout and "song_a" in r.stdout and "1970-01-01T00:01:00.000Z" in r.stdout  # ISO 8601 UTC, as every reader
    for bad in ("0", "6"):
        r = cli("top", "--recent", "--k", bad, "--redis", redis_url, "--namespace", namespace)
        assert r.returncode == 2 and "between 1 and K_max (5)" in r.stderr

    r = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
            "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}", "--recent-minutes", "0")
    assert r.returncode == 0, r.stderr
    r = cli("top", "--recent", "--json", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 1 and "--recent-minutes 0" in r.stderr
    r = cli("run", "--input", f"jsonl:{log}", "--redis", redis_url, "--recent-minutes", "-1")
    assert r.returncode == 2 and "--recent-minutes" in r.stderr


def test_top_recent_serves_the_last_ranking_marked_stale(tmp_path, redis_client, redis_url, namespace):
    from tests.events import ev

    log = tmp_path / "e.jsonl"
    log.write_bytes(ev("u1", "p1", "song_a", "START", 1, 7).replace(b"7}", b"%d}" % 2**70) + b"\n")  # beyond 64 bits
    assert cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", namespace,
               "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}").returncode == 0
    fresh = orjson.loads(cli("top", "--recent", "--json", "--redis", redis_url, "--namespace", namespace).stdout)
    assert fresh["watermark"] == 2**70 and fresh["items"] == [{"rank": 1, "song_id": "song_a", "plays": 1}]
    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost its data
    r = cli("top", "--recent", "--json", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 1 and "stale" in r.stderr
    stale = orjson.loads(r.stdout)
    assert stale["stale"] is True and stale["watermark"] == 2**70 and stale["items"] == fresh["items"]
    r = cli("top", "--recent", "--redis", redis_url, "--namespace", namespace)
    assert r.returncode == 1 and "STALE" in r.stdout and f"{2**70} ms" in r.stdout
