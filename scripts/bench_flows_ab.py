"""CPU seconds of two checkouts' flows on the same JSON Lines backlogs, alternating or together.

    .venv/bin/python scripts/bench_flows_ab.py --base OTHER/.venv/bin/rankflow --redis redis://127.0.0.1:6411/0

Generates the three logs once under ``--data`` (1M playback events of 100k users and 20k
songs; 600k score results of 100k players; 1M messages of 2,000 workspaces), then runs
each flow with ``--until-eof`` in each checkout, ``--reps`` times, and prints one JSON
line a run (the flow's user+sys CPU seconds, Redis's CPU seconds, wall seconds, the
barriers the run closed, the load average, ``result``: a digest of what the run left for
its readers (the final snapshot; activity: every workspace's ranking) and ``final``: a digest
of the final boards or song counts the run left in Redis), then per flow the medians with their
range, the median of the reps' ratios new/base, and whether every run was the same by either
digest (``exact``; ``final`` does not cover the activity flow's windows).

Why ``--together``: a flow's CPU seconds grow with its wall time, because every barrier
(``--barrier-ms``, an epoch of wall-clock time) costs the same work whatever it holds,
and because other processes on the cores slow every instruction. On a shared machine
whose load comes in bursts, two runs one after the other see different loads, and the
difference between them can exceed the difference between the checkouts. With
``--together`` each rep starts both checkouts' runs at the same moment, so both see the
same load; read the ratios, which are then paired. Redis's CPU seconds are then the
pair's (both runs share the Redis). Without it the runs alternate which goes first.

``--durable``: every run gets ``--recovery-dir`` with a fresh directory of its own (removed
after the run), so the figures include what recovery costs at every barrier (Bytewax's
recovery store, the player shards' changelogs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench.rig import timed  # noqa: E402
from rankflow.connectors.redis_keys import Keys  # noqa: E402
from rankflow.connectors.redis_read import current_generation, read_latest  # noqa: E402
from rankflow.products import get as product  # noqa: E402

LOGS = {
    "listeners": (["--users", "100000", "--songs", "20000", "--events", "1000000"], []),
    "boards": (["--kind", "scores", "--players", "100000", "--events", "600000"], ["--flow", "boards"]),
    "activity": (["--kind", "messages", "--workspaces", "2000", "--events", "1000000"], ["--flow", "activity"]),
}


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def result_digest(client: redis.Redis, flow: str, published: str, final: dict[str, Any]) -> str:
    """What a run left for its readers, as a digest that two exact runs share: the final
    snapshot's ranked items and dead-letter count and, for activity, every workspace's ranking
    (the slot its readers read). Run-specific fields (ids, times, epochs) are left out."""
    digest = hashlib.sha256(json.dumps([final.get("items"), final.get("dead_letters")], sort_keys=True,
                                       default=str).encode())
    if flow == "activity":
        keys = Keys(published, current_generation(client, published))
        slots = {k.decode(): v.decode() for k, v in client.hgetall(keys.workspace_slots).items()}  # type: ignore[union-attr]
        for ws in sorted(m.decode() for m in client.smembers(keys.workspaces)):  # type: ignore[union-attr]
            ranking = client.zrange(keys.workspace(ws, slots.get(ws, "a")), 0, -1, withscores=True)
            digest.update(json.dumps([ws, [(m.decode(), s) for m, s in ranking]]).encode())  # type: ignore[union-attr]
    return digest.hexdigest()[:16]


def final_state(client: redis.Redis, published: str) -> str | None:
    """A digest of what a run leaves that must not depend on its timing: every board's sorted set
    (``...:b:<game>:<board>``) and the listener flow's count table (``...:counts``), by key name
    after the namespace; None when the namespace holds neither (the activity flow)."""
    digest, found = hashlib.sha256(), False
    for key in sorted(set(client.scan_iter(match=f"{{{published}}}*", count=1000))):  # SCAN may repeat a key
        name = key.decode().partition("}")[2]
        tail = name.rpartition(":")[2]
        if (":b:" in name and tail not in ("m", "mt", "mn", "dm", "dt", "dn")) or name.endswith(":counts"):
            if client.type(key) != b"zset":
                continue
            found = True
            digest.update(name.encode() + b"\0")
            for member, score in client.zrange(key, 0, -1, withscores=True):  # + 0.0: -0 and 0 are one score
                digest.update(member + b"\0" + repr(score + 0.0).encode() + b"\0")
    return digest.hexdigest()[:16] if found else None


def one_run(rankflow: str, flow: str, log: Path, url: str, client: redis.Redis,
            durable: bool = False) -> dict[str, Any]:
    """One flow run to the end of its log: its CPU and wall seconds and the barriers it closed
    (the epoch of its last snapshot); its keys (in its product's namespace) and files are
    removed after. ``durable``: with a fresh ``--recovery-dir`` of its own."""
    namespace = f"ab-{uuid.uuid4().hex[:8]}"
    published = product(flow).namespace(namespace)
    dead = Path(f"/tmp/{namespace}-dead.jsonl")
    stderr = Path(f"/tmp/{namespace}.stderr")
    recovery = Path(f"/tmp/{namespace}-recovery")
    extra = ["--recovery-dir", str(recovery)] if durable else []
    try:
        run = timed([rankflow, "run", *LOGS[flow][1], "--input", f"jsonl:{log}", "--until-eof", "--redis", url,
                     "--namespace", namespace, "--dead-letter", f"jsonl:{dead}", *extra], stderr)
    except RuntimeError as exc:
        sys.exit(f"{rankflow} {flow}: {exc}")
    finally:
        shutil.rmtree(recovery, ignore_errors=True)
    final = read_latest(client, published) or {}
    result = result_digest(client, flow, published, final)
    state = final_state(client, published)
    dead.unlink(missing_ok=True)
    stderr.unlink(missing_ok=True)
    for key in client.scan_iter(match=f"{{{published}}}*", count=1000):
        client.unlink(key)
    return {"flow_cpu": run.cpu_s, "wall": run.seconds, "barriers": final.get("epoch"), "load": os.getloadavg()[0],
            "result": result, "final": state}


def one_rep(systems: dict[str, str], order: list[str], flow: str, log: Path, url: str, client: redis.Redis,
            together: bool, durable: bool = False) -> list[dict[str, Any]]:
    """Each system's run of ``flow``: one after the other in ``order``, or all at once."""
    def run(name: str) -> dict[str, Any]:
        return one_run(systems[name], flow, log, url, client, durable)

    if not together:
        rows = []
        for name in order:
            before = redis_cpu(client)
            rows.append({"system": name, **run(name), "redis_cpu": redis_cpu(client) - before})
        return rows
    before = redis_cpu(client)
    with ThreadPoolExecutor(len(order)) as pool:
        results = list(pool.map(run, order))
    pair = redis_cpu(client) - before
    return [{"system": name, **result, "redis_cpu": pair} for name, result in zip(order, results)]


def summary(flow: str, rows: list[dict[str, Any]], systems: dict[str, str]) -> list[str]:
    """Per system the medians and ranges; then the median and range of the reps' ratios new/base."""
    lines = []
    for name in systems:
        mine = [r for r in rows if r["flow"] == flow and r["system"] == name]
        cpu = [r["flow_cpu"] for r in mine]
        lines.append(f"{flow} {name}: median flow CPU {statistics.median(cpu):.2f} s ({min(cpu):.2f}-{max(cpu):.2f}), "
                     f"Redis CPU {statistics.median(r['redis_cpu'] for r in mine):.2f} s, "
                     f"wall {statistics.median(r['wall'] for r in mine):.2f} s, "
                     f"barriers {statistics.median(r['barriers'] or 0 for r in mine):.0f}")
    by_rep: dict[int, dict[str, float]] = {}
    for r in rows:
        if r["flow"] == flow:
            by_rep.setdefault(r["rep"], {})[r["system"]] = r["flow_cpu"]
    ratios = [rep["new"] / rep["base"] for rep in by_rep.values() if {"new", "base"} <= rep.keys()]
    results = {r["result"] for r in rows if r["flow"] == flow}
    lines.append(f"{flow} results: {'every run the same' if len(results) == 1 else f'{len(results)} different'}")
    if ratios:
        lines.append(f"{flow} new/base flow CPU per rep: median x{statistics.median(ratios):.3f} "
                     f"({min(ratios):.3f}-{max(ratios):.3f}, {sum(x < 1 for x in ratios)} of {len(ratios)} below 1)")
    finals = {r["final"] for r in rows if r["flow"] == flow}
    if finals != {None}:
        lines.append(f"{flow} exact: " + ("every run left the same final state" if len(finals) == 1
                                          else f"the runs' final states DIFFER: {sorted(map(str, finals))}"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--base", required=True, help="the other checkout's rankflow executable")
    parser.add_argument("--new", default=str(Path(sys.executable).with_name("rankflow")),
                        help="this checkout's rankflow executable (default: %(default)s)")
    parser.add_argument("--redis", required=True, help="a Redis URL the runs publish to (their own namespaces)")
    parser.add_argument("--data", type=Path, default=Path("data/ab"), help="where the logs are kept")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--flows", default=",".join(LOGS), help="comma-separated, of: %(default)s")
    parser.add_argument("--together", action="store_true",
                        help="start both checkouts' runs of a rep at the same moment (same machine load)")
    parser.add_argument("--durable", action="store_true",
                        help="run every flow with --recovery-dir (a fresh directory per run, removed after)")
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
        order = list(systems) if rep % 2 == 0 else list(systems)[::-1]
        for flow in flows:
            for row in one_rep(systems, order, flow, logs[flow], args.redis, client, args.together,
                                  args.durable):
                row = {"rep": rep, "flow": flow, **row}
                print(json.dumps(row), flush=True)
                rows.append(row)
    for flow in flows:
        print("\n".join(summary(flow, rows, systems)))


if __name__ == "__main__":
    main()
