"""``bench-boards`` part 5, big: ``big_players`` players on one board.

``--big-mode flow``: the durable flow on a log with one result per player (load time, peak RSS,
Redis ``used_memory``; the run is stopped if the machine runs low on memory, and
reports how far it got); ``--big-mode redis``: the Redis side alone, the boards
publisher writing the entries of one board straight from this process, in snapshots
of ``big_chunk`` entries.
"""

from __future__ import annotations

import os
import random
import subprocess
import time

from rankflow.bench import rig
from rankflow.bench.boards.big_reads import check_reads
from rankflow.bench.boards.core import BoardsBench
from rankflow.bench.boards.logs import one_result_per_player
from rankflow.bench.boards.results import GAME, MEMORY_DAY_MS, Big, BoardsBenchResult
from rankflow.connectors.redis_keys import Keys, boards_namespace


def big(bench: BoardsBench, result: BoardsBenchResult) -> None:
    cfg = bench.cfg
    for mode in (("flow", "redis") if cfg.big_mode == "both" else (cfg.big_mode,)):
        out = Big(mode=mode, players=cfg.big_players)
        started = time.perf_counter()
        bench.flush()
        if mode == "redis":
            result.big_redis = out
            _big_redis(bench, out)
        else:
            result.big = out
            _big_flow(bench, out)
        out.redis_bytes_per_entry = out.redis_used_memory_bytes / max(out.entries, 1)
        out.wall_s = time.perf_counter() - started
        bench.flush()


def _big_flow(bench: BoardsBench, out: Big) -> None:
    cfg = bench.cfg
    path = bench.work / "big.jsonl"
    started = time.perf_counter()
    bench.log(f"generating {cfg.big_players:,} players, one result each")
    one_result_per_player(path, cfg.big_players, bench.key, cfg.seed)
    out.generate_s = time.perf_counter() - started
    out.produce_s = bench.produce(path, "big")
    path.unlink()
    out.broker_rss_bytes = rig.proc_status(bench.rig.broker.pid(), "VmRSS")
    base = bench.used_memory()
    ns = "big"
    poller = rig.PositionsPoller.of_snapshot(bench.redis_url, *_snapshot_keys(ns), interval=0.5)
    poller.start()
    redis0, broker0 = rig.redis_cpu(bench.client), rig.cpu_seconds(bench.rig.broker.pid())
    started = time.perf_counter()
    recovery = bench.work / "big.recovery"  # durable, as production runs (issue 21: loaded by the flow, durable)
    proc = bench.rig.start(bench.flow_cmd("big", ns, "--until-eof", "--recovery-dir", str(recovery)), ns)
    peak, low = _watch(bench, proc, out, base)
    seconds = time.perf_counter() - started
    out.redis_cpu_s = rig.redis_cpu(bench.client) - redis0
    out.broker_cpu_s = rig.cpu_seconds(bench.rig.broker.pid()) - broker0
    poller.finish()
    out.process_peak_rss_bytes = peak
    out.min_available_bytes = low
    out.loaded_players = poller.total()
    out.complete = out.loaded_players >= cfg.big_players and proc.returncode == 0
    out.load_s = seconds
    out.results_per_s = out.loaded_players / seconds
    out.redis_used_memory_bytes = bench.used_memory() - base
    out.entries = bench.count_entries(ns)
    if out.complete:
        check_reads(bench.client, ns, out, cfg.big_players, cfg.seed)
        bench.log(f"big (flow): {out.reads_checked:,} answers checked against the log's ranks, "
                  f"{out.reads_wrong} wrong; {out.read_ms}")
    if proc.returncode not in (0, 130) and out.stopped_because is None:
        out.stopped_because = (f"the flow exited with {proc.returncode}: "
                               f"{bench.rig.stderr(ns).read_text(errors='replace')[-1500:]}")
    bench.log(f"big (flow): {out.loaded_players:,} of {cfg.big_players:,} players in {seconds:.0f} s; "
              f"{out.entries:,} entries; Redis {out.redis_used_memory_bytes / 2**30:.2f} GiB; flow peak RSS "
              f"{peak / 2**30:.2f} GiB; lowest available {low / 2**30:.1f} GiB")


def _snapshot_keys(ns: str) -> tuple[str, str]:
    keys = Keys(boards_namespace(ns))
    return keys.snapshot_id, keys.positions


def _watch(bench: BoardsBench, proc: subprocess.Popen, out: Big, base: int) -> tuple[int, int]:
    """Until the flow exits, or is stopped because the machine runs low on memory: its peak
    RSS (``VmHWM``) and the least memory the machine had available meanwhile."""
    cfg = bench.cfg
    peak, low = 0, rig.mem_available()
    while proc.poll() is None:
        peak = max(peak, rig.proc_status(proc.pid, "VmHWM"))
        try:
            out.flow_cpu_s = rig.cpu_seconds(proc.pid)  # the last reading before it exits (0.5 s apart)
        except OSError:
            pass
        low = min(low, rig.mem_available())
        if low < cfg.big_min_free_gib * 2**30:
            out.stopped_because = (f"the machine had {low / 2**30:.1f} GiB available (flow RSS {peak / 2**30:.1f} "
                                   f"GiB, Redis {(bench.used_memory() - base) / 2**30:.1f} GiB, broker "
                                   f"{rig.proc_status(bench.rig.broker.pid(), 'VmRSS') / 2**30:.1f} GiB): stopped")
            bench.log(out.stopped_because)
            rig.stop(proc, 300)
            break
        time.sleep(0.5)
    return peak, low


def _big_redis(bench: BoardsBench, out: Big) -> None:
    """The boards publisher alone: one board of ``big_players`` entries, in snapshots."""
    from rankflow.connectors.redis_boards import BoardsState
    from rankflow.connectors.redis_generations import join_run
    from rankflow.connectors.redis_publish import Publisher
    from rankflow.state.board_snapshot import BoardsSnapshot
    from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR

    cfg = bench.cfg
    ns = boards_namespace("bigr")
    token, generation = join_run(bench.client, ns, "bench-big", fresh=True)
    publisher = Publisher(bench.redis_url, ns, token, generation, live=True, state=BoardsState())
    rng = random.Random(cfg.seed)
    base, low = bench.used_memory(), rig.mem_available()
    rss0 = rig.proc_status(os.getpid(), "VmRSS")
    redis0 = rig.redis_cpu(bench.client)
    started = time.perf_counter()
    digits = max(7, len(str(cfg.big_players - 1)))
    done = 0
    for epoch, first in enumerate(range(0, cfg.big_players, cfg.big_chunk), start=1):
        n = min(cfg.big_chunk, cfg.big_players - first)
        entries = {(GAME, "all"): {f"p{i:0{digits}d}": (rng.randrange(0, 1_000_001, 5), MEMORY_DAY_MS + i)
                                   for i in range(first, first + n)}}
        snap = BoardsSnapshot(snapshot_id=token * SNAPSHOT_ID_RUN_FACTOR + epoch, run=token, epoch=epoch,
                              positions={"big/0": first + n}, dead_letters=0, k_max=100, boards={}, entries=entries,
                              dropped=[], aliases={}, partition_lag_ms={}, errors=[])
        publisher.publish(snap)
        done = first + n
        low = min(low, rig.mem_available())
        if low < cfg.big_min_free_gib * 2**30:
            out.stopped_because = f"the machine had {low / 2**30:.1f} GiB available: stopped"
            break
        if epoch % 20 == 0:
            bench.log(f"big (redis): {done:,} entries, {time.perf_counter() - started:.0f} s, Redis "
                      f"{(bench.used_memory() - base) / 2**30:.2f} GiB")
    out.load_s = time.perf_counter() - started
    out.loaded_players = out.entries = done
    out.complete = done >= cfg.big_players
    out.results_per_s = done / out.load_s
    out.redis_used_memory_bytes = bench.used_memory() - base
    out.redis_cpu_s = rig.redis_cpu(bench.client) - redis0
    out.process_peak_rss_bytes = rig.proc_status(os.getpid(), "VmRSS") - rss0  # what the publisher kept (growth)
    out.min_available_bytes = low
    publisher.close()
    bench.log(f"big (redis): {done:,} entries in {out.load_s:.0f} s ({out.results_per_s:,.0f}/s); Redis "
              f"{out.redis_used_memory_bytes / 2**30:.2f} GiB ({out.redis_used_memory_bytes / max(done, 1):.0f} "
              f"B/entry); this process grew {out.process_peak_rss_bytes / 2**30:.2f} GiB")
