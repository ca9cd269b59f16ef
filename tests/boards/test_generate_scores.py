"""Generated score logs: what they contain, checked against docs/semantics/boards.md by a small model of
its own (the standard library's json, hmac written out), never the generator's labels."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.kafka import topic_partitions
from rankflow.generate_scores import generate_scores

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
KEY = bytes.fromhex("5eed" * 16)
DAY = 86_400_000
SIX = ("game_id", "match_id", "player_id", "points", "played_at", "received_at")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=120, env=dict(os.environ))


# -- an independent reading of docs/semantics/boards.md sections 1 and 2 ------------------------------
def _reject_constant(name: str) -> None:
    raise ValueError(name)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(set(keys)) == len(keys), f"the generator wrote a key twice: {keys}"  # docs/semantics/boards.md leaves it open
    return dict(pairs)


def _all_strings_encode(value: Any) -> bool:
    """False when a string holds an unpaired surrogate (json reads ``"\\ud83c"`` into one)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_all_strings_encode(k) and _all_strings_encode(v) for k, v in value.items())
    if isinstance(value, list):
        return all(map(_all_strings_encode, value))
    return True


def expected_sig(ev: dict[str, Any]) -> str:
    ids = [ev[f].encode("utf-8") for f in ("game_id", "match_id", "player_id")]
    text = b"|".join(b"%d:%s" % (len(i), i) for i in ids) + b"|%d|%d" % (ev["points"], ev["played_at"])
    return hmac.new(KEY, text, hashlib.sha256).hexdigest()


def static_reason(raw: bytes, key: bool) -> tuple[str | None, Any]:
    """Checks 1 to 6."""
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return "invalid_json", None
    if not _all_strings_encode(obj):
        return "invalid_json", None
    if not isinstance(obj, dict):
        return "not_an_object", obj
    if any(f not in obj for f in SIX):
        return "missing_field", obj
    ids, nums = SIX[:3], SIX[3:]
    if any(not isinstance(obj[f], str) for f in ids) or any(type(obj[f]) is not int for f in nums):
        return "wrong_type", obj
    if (any(not 1 <= len(obj[f]) <= 64 for f in ids) or not 0 <= obj["points"] <= 10_000
            or any(not 0 <= obj[f] <= 253_402_300_799_999 for f in ("played_at", "received_at"))):
        return "out_of_range", obj
    if key and not (isinstance(obj.get("sig"), str) and obj["sig"] == expected_sig(obj)):
        return "bad_signature", obj
    return None, obj


@dataclass
class Outcomes:
    by_reason: Counter = field(default_factory=Counter)  # dead-letter reasons, "duplicate", "accepted"
    accepted: list[dict[str, Any]] = field(default_factory=list)
    reused: int = 0  # accepted with an identity that was accepted before and then forgotten


def outcomes(lines: list[bytes], key: bool) -> Outcomes:
    out = Outcomes()
    newest: dict[str, int] = {}
    known: dict[str, dict[tuple[str, str], tuple[int, int]]] = defaultdict(dict)
    ever: set[tuple[str, str, str]] = set()
    for raw in lines:
        reason, ev = static_reason(raw, key)
        if reason is None:
            player = ev["player_id"]
            r = newest[player] = max(newest.get(player, 0), ev["received_at"])
            if ev["played_at"] < r - DAY:
                reason = "too_old"
            elif ev["played_at"] > ev["received_at"] + 60_000:
                reason = "in_future"
            else:
                ident = (ev["game_id"], ev["match_id"])
                seen = known[player].get(ident)
                if seen is not None and seen[1] < r - DAY:
                    seen = None  # forgotten
                if seen is None:
                    known[player][ident] = (ev["points"], ev["played_at"])
                    out.reused += (player, *ident) in ever
                    ever.add((player, *ident))
                    out.accepted.append(ev)
                    reason = "accepted"
                else:
                    reason = "duplicate" if seen == (ev["points"], ev["played_at"]) else "conflict"
        out.by_reason[reason] += 1
    return out


def utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def week(ms: int) -> str:
    year, number, _ = utc(ms).isocalendar()
    return f"{year}-W{number:02d}"


# -- the tests ----------------------------------------------------------------------------
def test_reproducible_from_the_seed(tmp_path):
    a, b, c = (tmp_path / f"{n}.jsonl" for n in "abc")
    for path, seed in ((a, 7), (b, 7), (c, 8)):
        generate_scores(300, 3, 4000, seed, path, key=KEY)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert len(a.read_bytes().splitlines()) == 4000


def test_the_log_carries_every_kind_of_chaos(tmp_path):
    path = tmp_path / "scores.jsonl"
    stats = generate_scores(500, 4, 30_000, 11, path, key=KEY)
    lines = path.read_bytes().splitlines()
    assert len(lines) == stats.lines == 30_000
    seen = outcomes(lines, key=True)
    reasons = {"invalid_json", "not_an_object", "missing_field", "wrong_type", "out_of_range", "bad_signature",
               "too_old", "in_future", "conflict", "duplicate"}
    assert all(seen.by_reason[r] > 0 for r in reasons), seen.by_reason
    chaos = sum(seen.by_reason[r] for r in reasons)
    assert 0.01 * len(lines) < chaos < 0.1 * len(lines), "chaos at small rates"
    assert seen.reused > 0, "an identity reused after 24 h is a new result"
    made = stats.by_kind  # what the generator says it made agrees with the model
    assert seen.by_reason["duplicate"] == made["resubmission"] and seen.by_reason["conflict"] == made["conflict"]
    assert all(seen.by_reason[r] == made.get(f"malformed_{r}", made.get(r)) for r in reasons - {"duplicate", "conflict"})
    accepted = seen.accepted
    assert any(ev["played_at"] < ev["received_at"] - 3_600_000 for ev in accepted), "late results"
    assert any(ev["played_at"] > ev["received_at"] for ev in accepted), "played a little after its receipt"
    # without a key the same kind of log is checked without check 6, and is still mostly accepted
    unsigned = tmp_path / "unsigned.jsonl"
    generate_scores(500, 4, 5000, 11, unsigned)
    plain = outcomes(unsigned.read_bytes().splitlines(), key=False)
    assert plain.by_reason["bad_signature"] == 0 and plain.by_reason["accepted"] > 0.9 * 5000
    assert plain.by_reason["duplicate"] > 0
    assert any(b'"sig"' in line for line in unsigned.read_bytes().splitlines()), "an ignored sig"


def test_matches_ties_activity_and_periods(tmp_path):
    path = tmp_path / "scores.jsonl"
    generate_scores(2000, 4, 20_000, 5, path, key=KEY)
    lines = path.read_bytes().splitlines()
    accepted = outcomes(lines, key=True).accepted

    matches: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for ev in accepted:  # (a reused identity is another match: another played_at)
        matches[(ev["game_id"], ev["match_id"], ev["played_at"])].append(ev)
    sizes = Counter(len(m) for m in matches.values())
    assert set(sizes) <= set(range(1, 9)) and {2, 3, 4, 5, 6, 7, 8} <= set(sizes), sizes
    assert sizes[1] < sum(sizes.values()) / 10, "single results are the chaos of a player, not matches"
    multi = [m for m in matches.values() if len(m) > 1]
    assert sum(len({ev["points"] for ev in m}) < len(m) for m in multi) > len(multi) / 10, "ties within matches"
    assert all(ev["points"] % 10 == 0 for ev in accepted)
    assert any(ev["points"] == 0 for ev in accepted)
    assert len({ev["game_id"] for ev in accepted}) == 4

    activity = sorted(Counter(ev["player_id"] for ev in accepted).values(), reverse=True)
    assert activity[0] > 20 * activity[len(activity) // 2], "a few very active players, a long tail"

    days = {utc(ev["played_at"]).date().isoformat() for ev in accepted}
    assert {"2026-12-31", "2027-01-01", "2027-01-02", "2027-01-03", "2027-01-04"} <= days
    assert {week(ev["played_at"]) for ev in accepted} >= {"2026-W53", "2027-W01"}
    edge = [ev for ev in accepted if ev["played_at"] % DAY == DAY - 1 and ev["received_at"] // DAY > ev["played_at"] // DAY]
    edge_days = {utc(ev["played_at"]).date().isoformat() for ev in edge}
    assert {"2026-12-31", "2027-01-03"} <= edge_days, "23:59:59.999 results received after midnight"

    by_player: dict[str, list[int]] = defaultdict(list)
    for raw in lines:
        reason, ev = static_reason(raw, key=True)
        if reason is None:
            by_player[ev["player_id"]].append(ev["received_at"])
    worst = max(max((a - b for a, b in zip(r, r[1:])), default=0) for r in by_player.values())
    assert worst <= 1000, "per player, received_at goes back by at most a few ms"


def test_clean_log_is_valid_unique_and_signed(tmp_path):
    path = tmp_path / "clean.jsonl"
    stats = generate_scores(400, 3, 8000, 2, path, key=KEY, clean=True)
    assert set(stats.by_kind) <= {"result", "midnight_result"}
    lines = path.read_bytes().splitlines()
    seen = outcomes(lines, key=True)
    assert seen.by_reason == Counter(accepted=8000)
    events = [json.loads(line) for line in lines]
    assert all(ev["sig"] == expected_sig(ev) for ev in events)
    assert len({(ev["game_id"], ev["match_id"], ev["player_id"]) for ev in events}) == len(events)
    assert all(set(ev) == {*SIX, "sig"} for ev in events)


def test_cli_round_trip(tmp_path):
    out = tmp_path / "cli.jsonl"
    r = cli("generate", "--kind", "scores", "--players", "200", "--games", "3", "--events", "3000", "--seed", "4",
            "--signing-key", KEY.hex(), "--start", "2027-01-03T12:00Z", "--days", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "result" in r.stderr and "3000" in r.stderr
    same = tmp_path / "api.jsonl"
    start = int(datetime(2027, 1, 3, 12, tzinfo=UTC).timestamp() * 1000)
    generate_scores(200, 3, 3000, 4, same, key=KEY, start_ms=start, days=1)
    assert out.read_bytes() == same.read_bytes()
    days = {utc(ev["played_at"]).date().isoformat() for ev in outcomes(out.read_bytes().splitlines(), True).accepted}
    assert {"2027-01-03", "2027-01-04"} <= days

    r = cli("generate", "--kind", "scores", "--events", "10", "--signing-key", "nothex", "--out", str(out))
    assert r.returncode == 2 and "--signing-key" in r.stderr
    r = cli("generate", "--events", "10", "--out", str(out))
    assert r.returncode == 2 and "--users" in r.stderr


def read_with_partitions(brokers: str, topic: str) -> list[tuple[int, bytes | None, bytes]]:
    """Every message as (partition, key, value), each partition in offset order."""
    parts = topic_partitions(brokers, topic)
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "tests", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[tuple[int, bytes | None, bytes]] = []
    done: set[int] = set()
    while len(done) < len(parts):
        for m in consumer.consume(1000, 0.2):
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                done.add(m.partition())
                continue
            out.append((m.partition(), m.key(), m.value()))
    consumer.close()
    return out


def test_produce_keys_a_score_log_by_player(tmp_path, kafka_brokers, topic):
    log = tmp_path / "scores.jsonl"
    generate_scores(150, 3, 3000, 9, log, key=KEY)
    lines = log.read_bytes().splitlines()
    r = cli("produce", "--input", str(log), "--kafka", f"{kafka_brokers}/{topic}", "--partitions", "3",
            "--key-field", "player_id", "--no-progress")
    assert r.returncode == 0, r.stderr
    produced = read_with_partitions(kafka_brokers, topic)
    assert len(produced) == len(lines)

    partitions_of: dict[bytes, set[int]] = defaultdict(set)
    order: dict[bytes, list[bytes]] = defaultdict(list)
    for partition, key, value in produced:
        partitions_of[key or b""].add(partition)
        order[key or b""].append(value)
    expected: dict[bytes, list[bytes]] = defaultdict(list)
    for line in lines:
        _, ev = static_reason(line, key=False)
        player = ev.get("player_id") if isinstance(ev, dict) else None
        expected[player.encode() if isinstance(player, str) else b""].append(line)
    players = [k for k in expected if k]
    assert len(players) > 50
    assert all(partitions_of[p] and len(partitions_of[p]) == 1 for p in players), "one partition per player"
    assert all(order[p] == expected[p] for p in players), "each player's lines in file order"
    assert len(order[b""]) == len(expected[b""]) > 0, "lines without a string player_id get the empty key"


def test_generate_signs_with_the_key_in_the_environment_as_run_checks_with_it(tmp_path):
    """``$RANKFLOW_SIGNING_KEY`` is ``--signing-key``'s default for ``generate`` as for
    ``run`` and ``serve``: a log made with the variable set is signed with it."""
    out = tmp_path / "env.jsonl"
    env = {**os.environ, "RANKFLOW_SIGNING_KEY": KEY.hex()}
    r = subprocess.run([*RANKFLOW, "generate", "--kind", "scores", "--players", "50", "--events", "200", "--clean",
                        "--out", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert events and all(ev["sig"] == expected_sig(ev) for ev in events)
    env["RANKFLOW_SIGNING_KEY"] = "nothex"
    r = subprocess.run([*RANKFLOW, "generate", "--kind", "scores", "--events", "10", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "RANKFLOW_SIGNING_KEY" in r.stderr and "Traceback" not in r.stderr
