"""``bench-boards`` part 3, memory: bytes per board entry in Redis, in the flow, on disk."""

from __future__ import annotations

import shutil

from rankflow.bench import rig
from rankflow.bench.boards.core import BoardsBench
from rankflow.bench.boards.logs import one_result_per_player
from rankflow.bench.boards.results import BoardsBenchResult, Memory
from rankflow.connectors.board_read import read_boards


def memory(bench: BoardsBench, result: BoardsBenchResult) -> None:
    """``memory_players`` players with one result each on one game (4 boards each): Redis
    ``used_memory`` growth per entry (flow and baseline), the flow's peak RSS above an
    empty run's per entry, the durable run's recovery directory per entry."""
    cfg = bench.cfg
    out = result.memory = Memory(players=cfg.memory_players)
    bench.produce(bench.players_log(cfg.memory_players), "memory")
    empty = bench.work / "empty.jsonl"
    one_result_per_player(empty, 1, bench.key, cfg.seed)
    bench.produce(empty, "empty")
    bench.flush()
    out.rss_empty_bytes = bench.rig.timed(bench.command("flow", "empty", "mem-empty"), "mem-empty").peak_rss_bytes
    for system in ("flow", "flow_durable", "baseline"):
        bench.flush()
        before = bench.used_memory()
        name = f"mem-{system}"
        keep = bench.work / f"{name}.recovery"
        run = bench.rig.timed(bench.command(system, "memory", name), name)
        grown = bench.used_memory() - before
        out.load_s[system] = run.seconds
        if system == "baseline":
            out.redis_baseline_bytes = grown
            continue
        if system == "flow":
            out.rss_flow_bytes, out.redis_flow_bytes = run.peak_rss_bytes, grown
            out.entries = sum(len(b) for bs in read_boards(bench.client, name).values() for b in bs.values())
        else:
            out.rss_durable_bytes, out.recovery_dir_bytes = run.peak_rss_bytes, rig.dir_bytes(keep)
            shutil.rmtree(keep, ignore_errors=True)
        bench.log(f"{system}: {cfg.memory_players:,} players in {run.seconds:.1f} s, peak RSS "
                  f"{run.peak_rss_bytes / 2**20:,.0f} MiB, Redis +{grown / 2**20:,.0f} MiB")
    n = max(out.entries, 1)
    out.redis_bytes_per_entry = out.redis_flow_bytes / n
    out.baseline_redis_bytes_per_entry = out.redis_baseline_bytes / n
    out.flow_rss_bytes_per_entry = (out.rss_flow_bytes - out.rss_empty_bytes) / n
    out.flow_durable_rss_bytes_per_entry = (out.rss_durable_bytes - out.rss_empty_bytes) / n
    out.recovery_dir_bytes_per_entry = out.recovery_dir_bytes / n
    bench.flush()
    bench.log(f"per board entry ({out.entries:,}): Redis {out.redis_bytes_per_entry:,.0f} B (baseline "
              f"{out.baseline_redis_bytes_per_entry:,.0f} B), flow RSS {out.flow_rss_bytes_per_entry:,.0f} B "
              f"(durable {out.flow_durable_rss_bytes_per_entry:,.0f} B), recovery dir "
              f"{out.recovery_dir_bytes_per_entry:,.0f} B")
