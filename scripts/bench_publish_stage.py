"""How long an activity publish holds Redis: one script per snapshot vs staged (``--publish-stage``).

    .venv/bin/python scripts/bench_publish_stage.py [--pairs 300000] [--workspaces 5000]
        [--leave 0.3] [--stages 0,2000,500] [--reps 3]

Starts its own Redis and publishes, with each ``--publish-stage`` value in turn (round
robin, ``--reps`` times), the same snapshots through the flow's ``Publisher``: a full
snapshot of ``--pairs`` (workspace, channel) counts over ``--workspaces`` workspaces
(Zipf sizes, the largest 5,000 channels), then, alternately, ordinary barriers (2,000
random pairs change) and a bucket leaving the window (each pair changes with
probability ``--leave``). Redis's slow log (threshold 0) gives every script's time on
Redis's main thread: the longest one is the longest a query arriving meanwhile waits.
Prints per variant and kind of snapshot the longest script, Redis's total time and the
publisher's wall time (medians over the reps); writes ``bench-results/publish-stage.json``.
Every variant's rankings must end equal.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from rankflow.connectors.redis_activity import ActivityState
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_keys import Keys, activity_namespace
from rankflow.connectors.redis_publish import Publisher
from rankflow.connectors.redis_scripts import DROP_ACTIVITY_LUA, PUBLISH_ACTIVITY_LUA, STAGE_ACTIVITY_LUA
from rankflow.services import LocalRedis, free_port
from rankflow.state.activity_snapshot import ActivitySnapshot
from rankflow.state.snapshot import snapshot_id

Counts = dict[str, dict[str, int]]
OURS = {hashlib.sha1(s.encode()).hexdigest() for s in (PUBLISH_ACTIVITY_LUA, STAGE_ACTIVITY_LUA, DROP_ACTIVITY_LUA)}


def script_of(command: bytes | str) -> str:
    """The sha of a slow-log entry's ``EVALSHA``, or ''."""
    words = (command.decode(errors="replace") if isinstance(command, bytes) else command).split(" ", 2)
    return words[1] if words[0].upper() == "EVALSHA" and len(words) > 1 else ""


def workload(pairs: int, workspaces: int, leave: float, snapshots: int, seed: int) -> list[tuple[str, Counts]]:
    """The snapshots' changes: ``full`` first, then ``barrier`` and ``leave`` alternately."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(workspaces)]
    scale = pairs / sum(weights)
    sizes = [max(1, min(5_000, int(w * scale))) for w in weights]
    counts: Counts = {f"ws{i}": {f"ch{j}": rng.randint(1, 50) for j in range(n)} for i, n in enumerate(sizes)}
    flat = [(ws, ch) for ws, chs in counts.items() for ch in chs]
    out: list[tuple[str, Counts]] = [("full", {ws: dict(chs) for ws, chs in counts.items()})]
    for s in range(snapshots):
        if s % 2:
            chosen = [p for p in flat if rng.random() < leave]
            kind = "leave"
        else:
            chosen = rng.sample(flat, 2_000)
            kind = "barrier"
        changed: Counts = {}
        for ws, ch in chosen:
            changed.setdefault(ws, {})[ch] = max(0, counts[ws][ch] + rng.choice((-3, -1, 1, 2)))
        out.append((kind, changed))
    return out


def snap(token: int, epoch: int, changed: Counts, full: bool) -> ActivitySnapshot:
    return ActivitySnapshot(snapshot_id(token, epoch), token, epoch, {"f": epoch}, 0, {}, 100, epoch * 60_000,
                            60_000, 60, "messages", [], 0, changed, full, {}, [])


def run_variant(client: redis.Redis, url: str, stage: int, snapshots: list[tuple[str, Counts]]) -> dict[str, Any]:
    ns = activity_namespace(f"pub-{uuid.uuid4().hex[:8]}")
    token, generation = join_run(client, ns, uuid.uuid4().hex, fresh=True)
    pub = Publisher(url, ns, token, generation, state=ActivityState(stage_at=stage))
    per: dict[str, dict[str, list[float]]] = {}
    try:
        for epoch, (kind, changed) in enumerate(snapshots, 1):
            client.slowlog_reset()
            started = time.perf_counter()
            pub.publish(snap(token, epoch, changed, kind == "full"))
            wall = time.perf_counter() - started
            ours = [e["duration"] / 1000 for e in client.slowlog_get(1_000_000) if script_of(e["command"]) in OURS]
            got = per.setdefault(kind, {"longest_ms": [], "redis_ms": [], "wall_ms": [], "scripts": []})
            got["longest_ms"].append(max(ours, default=0.0))
            got["redis_ms"].append(sum(ours))
            got["wall_ms"].append(wall * 1000)
            got["scripts"].append(len(ours))
    finally:
        pub.close()
    final = Keys(ns, generation)
    slots = {w.decode(): s.decode() for w, s in client.hgetall(final.workspace_slots).items()}
    pipe = client.pipeline(transaction=False)
    workspaces = sorted(w.decode() for w in client.smembers(final.workspaces))
    for ws in workspaces:
        pipe.zrange(final.workspace(ws, slots.get(ws, "a")), 0, -1, withscores=True)
    state = {ws: sorted(entries) for ws, entries in zip(workspaces, pipe.execute())}
    return {"per": per, "state": hashlib.sha1(repr(sorted(state.items())).encode()).hexdigest()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=300_000)
    p.add_argument("--workspaces", type=int, default=5_000)
    p.add_argument("--leave", type=float, default=0.3)
    p.add_argument("--snapshots", type=int, default=6, help="after the full one (default: %(default)s)")
    p.add_argument("--stages", default="0,2000,500")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench-results")
    args = p.parse_args()
    stages = [int(x) for x in args.stages.split(",")]
    snapshots = workload(args.pairs, args.workspaces, args.leave, args.snapshots, args.seed)
    print(f"{sum(map(len, snapshots[0][1].values())):,} pairs; changes per snapshot: "
          f"{[sum(map(len, c.values())) for _, c in snapshots[1:]]}")
    with tempfile.TemporaryDirectory() as tmp:
        service = LocalRedis(free_port(), Path(tmp)).start()
        client = redis.Redis.from_url(service.url)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1_000_000)
        results: dict[int, list[dict[str, Any]]] = {s: [] for s in stages}
        try:
            for rep in range(args.reps):
                for stage in stages[rep % len(stages):] + stages[:rep % len(stages)]:
                    results[stage].append(run_variant(client, service.url, stage, snapshots))
                    client.flushall()
        finally:
            client.close()
            service.stop()
    assert len({r["state"] for rs in results.values() for r in rs}) == 1, "the variants' rankings differ"
    summary: dict[str, Any] = {"args": vars(args), "variants": {}}
    for stage, rs in results.items():
        row = summary["variants"][str(stage)] = {}
        for kind in rs[0]["per"]:
            row[kind] = {m: round(statistics.median(v for r in rs for v in r["per"][kind][m]), 2)
                         for m in ("longest_ms", "redis_ms", "wall_ms", "scripts")}
            print(f"--publish-stage {stage:>5} {kind:>8}: " + ", ".join(f"{m} {v:g}" for m, v in row[kind].items()))
    Path(args.out).mkdir(exist_ok=True)
    (Path(args.out) / "publish-stage.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
