"""Generated activity logs (rankflow generate --kind messages): what they contain, read back with
state.message_events and the single-partition window rules of docs/semantics/windows.md section 2."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from rankflow.generate_messages import (
    DEFAULT_START_MS,
    MALFORMED,
    MessageChaos,
    MessageLogGenerator,
    generate_messages,
)
from rankflow.state.events import DeadLetter
from rankflow.state.message_events import CHANNEL, TS, USER, WORKSPACE, parse_message, parse_message_records

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
BUCKET_MS, WINDOW = 60_000, 60  # the defaults of docs/semantics/windows.md section 2
VALID_KINDS = {"message", "bot", "burst", "far_late"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=120, env=dict(os.environ))


def read_lines(path) -> list[bytes]:
    """The lines of a JSON Lines file: every line is one, an empty one too; a final newline ends the last."""
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def expired_flags(events: list[tuple]) -> list[bool]:
    """docs/semantics/windows.md section 2 on one partition: W is the greatest ts so far, this event's included."""
    flags, w = [], None
    for event in events:
        w = event[TS] if w is None else max(w, event[TS])
        flags.append(event[TS] // BUCKET_MS < w // BUCKET_MS - WINDOW + 1)
    return flags


def labelled(events: int, seed: int = 1, **kwargs) -> tuple[MessageLogGenerator, list[tuple[str, bytes]]]:
    gen = MessageLogGenerator(kwargs.pop("workspaces", 100), kwargs.pop("channels", 200), kwargs.pop("users", 1000),
                              seed, **kwargs)
    return gen, list(gen.labelled_lines(events))


@pytest.fixture(scope="module")
def big():
    """A long log (about 3.5 hours of event time) with chaos five times the default, so every kind shows."""
    return labelled(120_000, seed=7, rate=10.0, chaos=MessageChaos().scaled(5.0))


def test_reproducible_from_the_seed(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    stats = [generate_messages(5000, seed, path, workspaces=20) for path, seed in ((a, 3), (b, 3), (c, 4))]
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert stats[0] == stats[1] and stats[0].lines == 5000 == sum(stats[0].by_kind.values())
    assert len(read_lines(a)) == 5000


def test_every_line_is_what_its_label_says(big):
    gen, lines = big
    events = []
    for offset, (kind, raw) in enumerate(lines):
        parsed = parse_message(raw, "m", offset, 1)
        if kind in VALID_KINDS:
            assert not isinstance(parsed, DeadLetter), (kind, raw, parsed)
            events.append((kind, parsed))
        else:
            assert isinstance(parsed, DeadLetter) and kind == f"malformed_{parsed.reason}", (kind, raw, parsed)
    flags = expired_flags([event for _, event in events])
    for (kind, event), expired in zip(events, flags):
        assert expired == (kind == "far_late"), (kind, event)  # and no other valid event is late enough


def test_every_kind_of_line_is_there(big):
    gen, lines = big
    kinds = Counter(kind for kind, _ in lines)
    assert set(kinds) == VALID_KINDS | {f"malformed_{reason}" for reason, _ in MALFORMED}
    assert gen.stats.by_kind == dict(kinds)
    raws = [raw for kind, raw in lines if kind == "malformed_invalid_json"]
    assert b"" in raws, "an empty line"
    assert any(b'"\\ud800"' in raw for raw in raws), "a lone surrogate escape"
    assert any(b"NaN" in raw for raw in raws) and any(b"\xff" in raw for raw in raws)
    dead = [parse_message(raw, "m", 0, 1) for kind, raw in lines if kind.startswith("malformed_")]
    details = Counter(d.detail for d in dead)
    assert len(details) >= 25, "the malformed lines vary"
    assert any("ts must be an integer" in d for d in details) and any("ts must be >= 0" in d for d in details)
    assert any(d.startswith("expected a JSON object") for d in details)


def test_counts_of_each_kind_are_roughly_as_configured():
    n = 100_000
    gen, lines = labelled(n, seed=11, rate=20.0)  # 83 minutes: about 8 bursts
    kinds = Counter(kind for kind, _ in lines)
    chaos = MessageChaos()
    malformed = sum(v for k, v in kinds.items() if k.startswith("malformed_"))
    assert abs(malformed - chaos.malformed * n) < 5 * (chaos.malformed * n) ** 0.5 + 10
    assert abs(kinds["far_late"] - chaos.far_late * n) < 5 * (chaos.far_late * n) ** 0.5 + 10
    for reason, _ in MALFORMED:  # drawn evenly
        assert abs(kinds[f"malformed_{reason}"] - malformed / len(MALFORMED)) < malformed / len(MALFORMED) / 2
    assert abs(kinds["bot"] - 2 * 0.03 * n) < 0.006 * n  # two bots, 3% each
    assert 0 < kinds["burst"] < 0.3 * n
    assert kinds["message"] > 0.6 * n
    assert 0 < gen.stats.out_of_order < n


def test_chaos_scales_and_zero_is_none():
    _, lines = labelled(20_000, seed=2, chaos=MessageChaos().scaled(0.0))
    kinds = Counter(kind for kind, _ in lines)
    assert set(kinds) <= {"message", "bot", "burst"}


def test_clean_gives_only_valid_events_in_order(tmp_path):
    out = tmp_path / "clean.jsonl"
    stats = generate_messages(50_000, 5, out, rate=20.0, clean=True)
    lines = read_lines(out)
    events, dead = parse_message_records(lines, range(len(lines)), "m", 1)
    assert dead == [] and len(events) == 50_000
    ts = [e[TS] for e in events]
    assert ts == sorted(ts) and ts[0] >= DEFAULT_START_MS
    assert not any(expired_flags(events)) and stats.out_of_order == 0
    assert set(stats.by_kind) <= {"message", "bot", "burst"} and stats.by_kind["bot"] > 0


def test_event_time_moves_at_the_rate_and_mostly_forward():
    gen, lines = labelled(30_000, seed=4, rate=50.0, start_ms=1_000_000)
    events = [parse_message(raw, "m", 0, 1) for kind, raw in lines if kind in ("message", "bot", "burst")]
    ts = [e[TS] for e in events]
    span_s = (max(ts) - min(ts)) / 1000
    assert 0.9 * 30_000 / 50 < span_s < 1.1 * 30_000 / 50
    assert min(ts) >= 1_000_000
    running, lateness = 0, []
    for t in ts:
        running = max(running, t)
        lateness.append(running - t)
    assert max(lateness) <= 50_000, "late, but tens of seconds at most"
    assert sum(x > 1000 for x in lateness) > 0.01 * len(ts), "some a second or more late"
    assert sorted(lateness)[len(ts) // 2] < 200, "most nearly in order"


def test_zipf_skew_over_workspaces_channels_and_users(big):
    _, lines = big
    events = [parse_message(raw, "m", 0, 1) for kind, raw in lines if kind == "message"]
    by_ws = Counter(e[WORKSPACE] for e in events)
    counts = [n for _, n in by_ws.most_common()]
    assert len(counts) == 100
    assert counts[0] > 0.15 * len(events) and sum(counts[:10]) > 0.5 * len(events)
    assert counts[0] > 3 * counts[9] > 3 * counts[-1]
    top = by_ws.most_common(1)[0][0]
    channels = Counter(e[CHANNEL] for e in events if e[WORKSPACE] == top)
    assert channels.most_common(1)[0][0] == "general" and channels["general"] > 3 * channels.most_common(10)[-1][1]
    users = Counter(e[USER] for e in events if e[WORKSPACE] == top)
    assert users.most_common(1)[0][1] > 10 * sorted(users.values())[len(users) // 2]


def test_a_bot_dominates_its_channel_so_messages_and_users_differ(big):
    gen, lines = big
    events = [parse_message(raw, "m", 0, 1) for kind, raw in lines if kind in ("message", "bot", "burst")]
    assert len(gen.stats.bot_channels) == 2
    for ws, ch, bot in gen.stats.bot_channels:
        here = [e for e in events if e[WORKSPACE] == ws and e[CHANNEL] == ch]
        by_user = Counter(e[USER] for e in here)
        assert by_user.most_common(1)[0][0] == bot and by_user[bot] > 0.8 * len(here) and by_user[bot] > 2000
        # ranked by messages the channel is near the top of its workspace; by distinct users it is not
        messages = Counter(e[CHANNEL] for e in events if e[WORKSPACE] == ws)
        users = defaultdict(set)
        for e in events:
            if e[WORKSPACE] == ws:
                users[e[CHANNEL]].add(e[USER])
        by_messages = [c for c, _ in messages.most_common()]
        by_users = sorted(users, key=lambda c: -len(users[c]))
        assert by_messages.index(ch) < 3 and by_users.index(ch) > 10


def test_bursts_make_a_channel_hot_for_a_few_minutes(big):
    _, lines = big
    bursts = defaultdict(list)
    for kind, raw in lines:
        if kind == "burst":
            e = parse_message(raw, "m", 0, 1)
            bursts[(e[WORKSPACE], e[CHANNEL])].append(e)
    assert bursts
    runs = []  # each channel's burst messages, cut where five minutes pass without one: one run per burst
    for events in bursts.values():
        times = sorted(e[TS] for e in events)
        start = 0
        for i in range(1, len(times) + 1):
            if i == len(times) or times[i] - times[i - 1] > 5 * 60_000:
                runs.append((i - start, times[i - 1] - times[start], events))
                start = i
    assert len(runs) > 5
    size, span, events = max(runs, key=lambda run: run[0])
    assert size > 100 and span <= 20 * 60_000  # a few minutes (overlapping bursts of one channel may chain)
    assert len({e[USER] for e in events}) > 30, "many people pile in"


def test_ids_meet_the_edges_of_the_rules(big):
    _, lines = big
    events = [parse_message(raw, "m", 0, 1) for kind, raw in lines if kind in ("message", "bot", "burst")]
    workspaces = {e[WORKSPACE] for e in events}
    channels = {e[CHANNEL] for e in events}
    users = {e[USER] for e in events}
    assert {"w", "w!", "acme", "Acme"} <= workspaces
    assert {"general", "General", "🎉-party"} <= channels and any(len(c) == 64 for c in channels)
    assert {"josé", "🦊fox"} <= users and any(len(u) == 64 for u in users)
    assert any(b"\\u" in raw for kind, raw in lines if kind == "message"), "escaped non-ASCII: still one character"


@pytest.mark.parametrize("kwargs", [dict(workspaces=1, channels=1, users=1), dict(bots=0), dict(rate=200_000.0)])
def test_small_and_extreme_shapes(kwargs, tmp_path):
    out = tmp_path / "m.jsonl"
    stats = generate_messages(3000, 1, out, **kwargs)
    lines = read_lines(out)
    assert len(lines) == 3000 and stats.lines == 3000
    events, dead = parse_message_records(lines, range(3000), "m", 1)
    assert len(events) + len(dead) == 3000
    if kwargs.get("bots") == 0:
        assert "bot" not in stats.by_kind
    if "rate" in kwargs:  # 3000 events at 200k/s: 15 ms, and the late ones (the far-late ones aside)
        ts = sorted(e[TS] for e in events)
        assert ts[-1] - ts[len(ts) // 50] < 60_000


def test_cli_generate_messages(tmp_path):
    out = tmp_path / "m.jsonl"
    r = cli("generate", "--kind", "messages", "--events", "4000", "--seed", "9", "--workspaces", "10",
            "--channels", "30", "--users", "50", "--rate", "20", "--start-ms", "0", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "wrote 4000 message events" in r.stderr and "message" in r.stderr and "bot " in r.stderr
    lines = read_lines(out)
    events, _ = parse_message_records(lines, range(len(lines)), "m", 1)
    assert len(lines) == 4000 and len({e[WORKSPACE] for e in events}) == 10
    assert min(e[TS] for e in events) >= 0
    assert len({e[CHANNEL] for e in events if e[WORKSPACE] == "acme"}) <= 30

    again = tmp_path / "again.jsonl"
    cli("generate", "--kind", "messages", "--events", "4000", "--seed", "9", "--workspaces", "10",
        "--channels", "30", "--users", "50", "--rate", "20", "--start-ms", "0", "--out", str(again))
    assert again.read_bytes() == out.read_bytes()

    clean = tmp_path / "clean.jsonl"
    r = cli("generate", "--kind", "messages", "--events", "3000", "--clean", "--out", str(clean))
    assert r.returncode == 0 and "(clean)" in r.stderr
    lines = read_lines(clean)
    assert parse_message_records(lines, range(len(lines)), "m", 1)[1] == []


@pytest.mark.parametrize("args", [["--rate", "0"], ["--chaos", "-1"], ["--bots", "-1"], ["--start-ms", "-5"],
                                  ["--workspaces", "0"]])
def test_cli_usage_errors(args, tmp_path):
    r = cli("generate", "--kind", "messages", "--events", "10", "--out", str(tmp_path / "x.jsonl"), *args)
    assert r.returncode == 2, r.stderr
