"""CPU seconds of two checkouts' flows on the same JSON Lines backlogs, alternating.

    .venv/bin/python scripts/bench_flows_ab.py --base OTHER/.venv/bin/rankflow --redis redis://127.0.0.1:6411/0

Generates the three logs once under ``--data`` (1M playback events of 100k users and 20k
songs; 600k score results of 100k players; 1M messages of 2,000 workspaces), then runs
each flow with ``--until-eof`` in each checkout, ``--reps`` times, alternating which goes
first, and prints one JSON line a run (the flow's user+sys CPU seconds, Redis's CPU
seconds, wall seconds, the load average) and the medians. CPU seconds move much less
than wall time on a shared machine: compare those.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench.rig import timed  # noqa: E402

LOGS = {
    "listeners": (["--users", "100000", "--songs", "20000", "--events", "1000000"], []),
    "boards": (["--kind", "scores", "--players", "100000", "--events", "600000"], ["--flow", "boards"]),
    "activity": (["--kind", "messages", "--workspaces", "2000", "--events", "1000000"], ["--flow", "activity"]),
}


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def one_run(rankflow: str, flow: str, log: Path, url: str, client: redis.Redis) -> dict[str, float]:
    namespace = f"ab-{uuid.uuid4().hex[:8]}"
    dead = Path(f"/tmp/{namespace}-dead.jsonl")
    before = redis_cpu(client)
    stderr = Path(f"/tmp/{namespace}.stderr")
    try:
        run = timed([rankflow, "run", *LOGS[flow][1], "--input", f"jsonl:{log}", "--until-eof", "--redis", url,
                     "--namespace", namespace, "--dead-letter", f"jsonl:{dead}"], stderr)
    except RuntimeError as exc:
        sys.exit(f"{rankflow} {flow}: {exc}")
    redis_s = redis_cpu(client) - before
    dead.unlink(missing_ok=True)
    stderr.unlink(missing_ok=True)
    for key in client.scan_iter(match=f"{{{namespace}}}*", count=1000):
        client.unlink(key)
    return {"flow_cpu": run.cpu_s, "redis_cpu": redis_s, "wall": run.seconds, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--base", required=True, help="the other checkout's rankflow executable")
    parser.add_argument("--new", default=str(Path(sys.executable).with_name("rankflow")))
    parser.add_argument("--redis", required=True)
    parser.add_argument("--data", type=Path, default=Path("data/ab"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--flows", default=",".join(LOGS))
    args = parser.parse_args()
    systems, flows = {"base": args.base, "new": args.new}, args.flows.split(",")
    client = redis.Redis.from_url(args.redis)
    args.data.mkdir(parents=True, exist_ok=True)
    logs = {flow: args.data / f"{flow}.jsonl" for flow in flows}
    for flow, log in logs.items():
        if not log.exists():
            subprocess.run([args.new, "generate", *LOGS[flow][0], "--seed", "1", "--out", str(log)], check=True,
                           capture_output=True)
    rows = []
    for rep in range(args.reps):
        for flow in flows:
            for name in (list(systems) if rep % 2 == 0 else list(systems)[::-1]):
                row = {"rep": rep, "flow": flow, "system": name, **one_run(systems[name], flow, logs[flow],
                                                                          args.redis, client)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    for flow in flows:
        for name in systems:
            mine = [r for r in rows if r["flow"] == flow and r["system"] == name]
            print(f"{flow} {name}: median flow CPU {statistics.median(r['flow_cpu'] for r in mine):.2f} s, "
                  f"Redis CPU {statistics.median(r['redis_cpu'] for r in mine):.2f} s, "
                  f"wall {statistics.median(r['wall'] for r in mine):.2f} s")


if __name__ == "__main__":
    main()
