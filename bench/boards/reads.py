"""``bench-boards`` part 4, reads: board queries while the flow publishes, then idle.

A board of ``reads_players`` players, then steady traffic while the flow publishes;
``BoardReader.top(game, "all", 100)`` and ``.player(game, "all", a random player)`` at
``reads_rate`` requests/s each, open-loop, and the same two over HTTP from ``rankflow
serve`` with ``--board-index redis`` and ``--board-index memory``; then all again with
the traffic stopped.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from typing import Any

import redis

from rankflow.bench import rig
from rankflow.bench.api_load import run_load
from rankflow.bench.boards.core import BoardsBench
from rankflow.bench.boards.logs import traffic_log
from rankflow.bench.boards.results import GAME, BoardsBenchResult, Latency, Reads
from rankflow.connectors.board_read import BoardReader
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.services import free_port

Served = tuple[subprocess.Popen, int]  # a ``rankflow serve`` and its port


def reads(bench: BoardsBench, result: BoardsBenchResult) -> None:
    cfg = bench.cfg
    out = result.reads = Reads(board_players=cfg.reads_players, traffic_rate=cfg.reads_traffic,
                               rate=cfg.reads_rate, seconds=cfg.reads_s)
    preload = bench.players_log(cfg.reads_players)
    traffic = bench.work / "reads-traffic.jsonl"
    traffic_log(traffic, int(cfg.reads_traffic * (cfg.reads_s * 4 + 60)), cfg.reads_players, bench.key, cfg.seed)
    topic, ns = "reads", "reads"
    bench.flush()
    bench.produce(preload, topic)
    proc = bench.rig.start(bench.flow_cmd(topic, ns), ns)
    poller = _poller(bench, ns)
    poller.start()
    feeder, servers = None, {}
    try:
        rig.wait_until(lambda: poller.total() >= cfg.reads_players, 600, proc, "the flow did not load the board",
                       0.2, bench.rig.stderr(ns))
        bench.log(f"board of {cfg.reads_players:,} players loaded; traffic {cfg.reads_traffic:,} results/s")
        # both servers before the traffic: the memory one loads the boards (a reload is not what is measured)
        servers["redis"] = _serve(bench, ns, "redis")
        started = time.monotonic()
        servers["memory"] = _serve(bench, ns, "memory")
        out.memory_entries, out.memory_loads = _mirror_loaded(servers["memory"], cfg.reads_players)
        out.memory_load_s = time.monotonic() - started
        bench.log(f"rankflow serve --board-index memory loaded {out.memory_entries:,} entries in "
                  f"{out.memory_load_s:.1f} s")
        feeder = rig.spawn(rig.paced_child, bench.brokers, topic, str(traffic), cfg.reads_traffic, "player_id",
                           None, 0, time.time() + 4 * cfg.reads_s + 50)
        time.sleep(3.0)  # the traffic reaches the flow and its snapshots
        digits = max(7, len(str(cfg.reads_players - 1)))
        players = [f"p{i:0{digits}d}" for i in
                   random.Random(cfg.seed).sample(range(cfg.reads_players), min(10_000, cfg.reads_players))]
        seen0 = len(poller.seen)
        pids = {"flow": proc.pid, **bench.rig.services_pids(), "feeder": feeder.pid, "bench (readers)": os.getpid(),
                "serve (redis)": servers["redis"][0].pid, "serve (memory)": servers["memory"][0].pid}
        for phase in ("traffic", "idle"):
            if phase == "idle":  # the same readers with the traffic stopped: what the machine gives them
                rig.end_child(feeder)
                del pids["feeder"]
                servers["memory"][0].send_signal(signal.SIGCONT)  # it follows again (or loads again)
                time.sleep(2.0)
                _mirror_loaded(servers["memory"], cfg.reads_players)
            _phase(bench, out, phase, pids, servers, ns, players)
            if phase == "traffic":
                out.snapshots_during = len(poller.seen) - seen0
        servers["memory"][0].send_signal(signal.SIGCONT)
        out.serve_rss_bytes = {index: rig.proc_status(server.pid, "VmRSS") for index, (server, _) in servers.items()}
        out.memory_loads = _metric(servers["memory"][1], "rankflow_api_board_loads_total")
        out.memory_bytes_per_entry = (out.serve_rss_bytes["memory"] - out.serve_rss_bytes["redis"]) / \
            max(1, out.memory_entries)
        bench.log(f"rankflow serve RSS: {out.serve_rss_bytes}; memory index {out.memory_bytes_per_entry:,.0f} "
                  f"bytes per entry")
    finally:
        for server, _ in servers.values():
            server.send_signal(signal.SIGCONT)
            rig.stop(server, 30)
        rig.end_child(feeder)
        rig.stop(proc)
        poller.finish()
    if poller.redis_errors:  # e.g. BUSY: a publish script held Redis past its busy threshold
        bench.log(f"the snapshot poller's reads failed {poller.redis_errors} times: {poller.last_redis_error}")
    bench.flush()


def _poller(bench: BoardsBench, ns: str) -> rig.PositionsPoller:
    keys = Keys(boards_namespace(ns))
    return rig.PositionsPoller.of_snapshot(bench.redis_url, keys.snapshot_id, keys.positions, interval=0.1)


def _phase(bench: BoardsBench, out: Reads, phase: str, pids: dict[str, int | None], servers: dict[str, Served],
           ns: str, players: list[str]) -> None:
    """One phase: HTTP on the memory server, then (that server stopped: it takes no CPU from
    the others' measurements) the Redis readers, then HTTP on the Redis server."""
    cfg = bench.cfg
    rig.slowlog_reset(bench.client)
    meter = rig.CpuMeter(pids)
    _http_phase(bench, out, phase, "memory", servers["memory"], players)
    servers["memory"][0].send_signal(signal.SIGSTOP)
    for query in ("top", "player"):
        latency = rig.paced_load(_reader(bench, ns, query, players), cfg.reads_rate, cfg.reads_s)
        setattr(out, query if phase == "traffic" else f"idle_{query}", latency)
        bench.log(f"{phase}, {query} (Redis): {latency.achieved_rps:,.0f} req/s, p50 {rig.fmt(latency.p50_ms, '.2f')} "
                  f"ms, p99 {rig.fmt(latency.p99_ms, '.2f')} ms, max {latency.max_ms:.1f} ms, {latency.errors} errors")
    _http_phase(bench, out, phase, "redis", servers["redis"], players)
    out.cpu_cores[phase] = meter.cores()
    out.redis_slow[phase] = _slowlog(bench)
    bench.log(f"{phase}: CPU cores used {out.cpu_cores[phase]}; Redis commands over 1 ms: {out.redis_slow[phase]}")


def _reader(bench: BoardsBench, ns: str, query: str, players: list[str]) -> Any:
    """A :func:`rig.paced_load` client of ``BoardReader``: ``top`` n=100, or a random player's rank."""
    def make() -> Any:
        client = redis.Redis.from_url(bench.redis_url)
        board = BoardReader(client, ns)

        def call(i: int) -> None:
            if query == "top":
                answer = board.top(GAME, "all", 100)
                assert len(answer["items"]) == 100
            else:
                board.player(GAME, "all", players[i % len(players)])
        return call, client.close
    return make


def _slowlog(bench: BoardsBench) -> dict[str, Any]:
    """Commands that kept Redis busy over 1 ms since the reset (a script blocks every reader meanwhile)."""
    from rankflow.connectors.redis_scripts import BOARD_READ_LUA, PUBLISH_BOARDS_LUA

    return rig.slowlog_by_command(bench.client, {PUBLISH_BOARDS_LUA: "EVALSHA (publish)",
                                                 BOARD_READ_LUA: "EVALSHA (board query)"})


def _http_phase(bench: BoardsBench, out: Reads, phase: str, index: str, served: Served, players: list[str]) -> None:
    """``top`` then ``player`` over HTTP on the server of ``--board-index index``, and the
    server's CPU per request for each (its CPU seconds over the load's requests: goal 4
    of issue 21 asks at most 50 us)."""
    server, port = served
    for query in ("top", "player"):
        background = _background_cores(server.pid)
        cpu0, started = rig.cpu_seconds(server.pid), time.monotonic()
        latency = _http_load(bench, port, query, players)
        cpu_s, wall = rig.cpu_seconds(server.pid) - cpu0, time.monotonic() - started
        cpu_us = cpu_s / max(1, latency.requests) * 1e6
        net_us = max(0.0, cpu_s - background * wall) / max(1, latency.requests) * 1e6
        answer = {**asdict(latency), "server_cpu_us_per_request": round(cpu_us, 1),
                  "server_background_cores": round(background, 3), "server_net_cpu_us_per_request": round(net_us, 1)}
        (out.http if index == "redis" else out.http_memory).setdefault(phase, {})[query] = answer
        bench.log(f"{phase}, {query} (HTTP, --board-index {index}): {latency.achieved_rps:,.0f} req/s, p50 "
                  f"{latency.p50_ms:.2f} ms, p99 {latency.p99_ms:.2f} ms, max {latency.max_ms:.1f} ms, "
                  f"{latency.errors} errors, server CPU {cpu_us:,.0f} us per request ({net_us:,.0f} over its "
                  f"{background:.3f} cores without requests)")


def _background_cores(pid: int, seconds: float = 2.0) -> float:
    """The server's CPU cores without requests (following snapshots, polling): what a
    request's share leaves out."""
    cpu0 = rig.cpu_seconds(pid)
    time.sleep(seconds)
    return (rig.cpu_seconds(pid) - cpu0) / seconds


def _http_load(bench: BoardsBench, port: int, query: str, players: list[str]) -> Latency:
    """``GET /boards/arena/all/top?n=100`` or ``.../players/{id}`` open-loop (``api_load``)."""
    def path(i: int) -> str:
        if query == "top":
            return f"/boards/{GAME}/all/top?n=100"
        return f"/boards/{GAME}/all/players/{players[i % len(players)]}"

    cfg = bench.cfg
    load = asyncio.run(run_load("127.0.0.1", port, path, cfg.reads_rate, cfg.reads_s))
    errors = load.errors + sum(n for status, n in load.statuses.items() if status != 200)
    summary = load.summary()
    return Latency(requests=load.requests, errors=errors, achieved_rps=summary["rps"], p50_ms=summary["p50_ms"],
                   p99_ms=summary["p99_ms"], max_ms=summary["max_ms"])


def _serve(bench: BoardsBench, namespace: str, board_index: str = "redis") -> Served:
    """``rankflow serve --board-index INDEX`` on the namespace, once it answers ``GET /boards/...``."""
    port = free_port()
    name = f"serve-{board_index}"
    server = bench.rig.start([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                              "--redis", bench.redis_url, "--namespace", namespace, "--board-index", board_index], name)

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/boards/{GAME}/all/top?n=1", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        rig.wait_until(answers, 60, server, "rankflow serve did not answer", 0.2, bench.rig.stderr(name))
    except RuntimeError:
        server.kill()
        raise
    return server, port


def _mirror_loaded(served: Served, players: int) -> tuple[int, int]:
    """Wait until ``rankflow serve --board-index memory`` serves from memory (its
    ``/metrics`` count the entries it holds); the number of entries and of loads."""
    server, port = served
    rig.wait_until(lambda: _metric(port, "rankflow_api_board_entries") >= players, 600, server,
                   "rankflow serve --board-index memory did not load the boards", 0.5)
    return _metric(port, "rankflow_api_board_entries"), _metric(port, "rankflow_api_board_loads_total")


def _metric(port: int, name: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return 0
