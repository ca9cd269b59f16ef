"""``make bench-capacity``: requests/s of one ``rankflow serve`` at p99 <= 5 ms while a flow publishes.

    python scripts/bench_capacity.py [--reps 3] [--step-s 5] [--p99-ms 5] [--connections 32]
        [--traffic 2000] [--cpu-rate 3000] [--players 50000] [--phases boards,listeners]
        [--via serve,nginx] [--nginx-workers 1] [--oha PATH] [--base-python PATH] [--out bench-results]

One Redis, one ``rankflow serve --board-index memory`` (every product) with the capacity
benchmark's empty control route (``api.bench_control``), and the load generator ``oha``
(open loop, ``--connections`` keep-alive connections, latency from when each request was
due: ``rankflow.bench.capacity``). Two phases, each with its flow following a JSON Lines
file that a feeder process appends to at a steady ``--traffic`` per second (the local
broker would take a core of its own: see ``scripts/bench_api.py``):

* **boards**: ``rankflow run --flow boards`` on a board of ``--players`` players (one
  result each), then ``--traffic`` signed match results/s; the routes
  ``GET /boards/arena/all/top?n=100`` and ``GET /boards/arena/all/players/{random player}``;
* **listeners**: ``rankflow run`` on ``--traffic`` playback events/s; ``GET /rankings?k=100``.

In each phase and each rep, for the control and every route (the order rotating by rep):

1. a step at ``--cpu-rate`` requests/s: the server's CPU seconds (``/proc/PID/stat``) over
   the requests answered. The application's own CPU per request is the route's minus the
   control's at that rate in that phase: what is left when a wake-up, a read, a parse and a
   write (the server before any of rankflow's code) are taken away;
2. the capacity search (``search_capacity``): ``--step-s`` steps, doubling the offered rate
   while the p99 stays at or under ``--p99-ms`` and every request is answered, then
   bisecting; a rate fails only if two steps at it fail (one stall of another process on this
   shared machine can fail one); the capacity is the requests/s answered at the highest
   passing rate.

Then the same routes through Debian's nginx with the docs' example configuration
(``rankflow.services.LocalNginx``: its cache, ``X-Cache``): nginx caches only what the
service marks cacheable (``Cache-Control``), so until it does, every request goes through
to the service and this measures nginx's proxying. The share of requests nginx answered
itself is the requests it took minus the ones the service counted for that route
(``/metrics``), over the requests it took; a few ``X-Cache`` headers are sampled beside it.

A step measures only once the service answers the route as it will for the rest of the run:
the boards phase starts once the board mirror serves (``/health``: ``board_mirror.ready``,
with a snapshot id), not when a rank first answers (Redis answers it until then, through the
ASGI path), and every phase once the snapshot served moved on since the feeder started (the
traffic reaches the service). Each CPU step records the share of the route's requests the
server's protocol answered itself (``rankflow_api_prepared_answers_total`` over
``rankflow_api_requests_total``, ``api.prepared``): a share below 1 means some took the ASGI path.

``--base-python PATH`` starts a second ``rankflow serve`` with another checkout's Python (its
``.venv/bin/python``: the code before a change), on the same Redis and flows; its control and
routes (named ``... (base)``) are measured in the same reps, each right beside this checkout's
(alternated, the order rotating by rep): a before/after pair in one run, on the same machine
load. Its application figure is against its own control.

Figures per target: medians over the reps, and every step. Writes
``bench-results/capacity.json`` and prints a table. Wall-clock latency on this machine moves
by 20-40% between minutes; the CPU per request moves much less: compare with those.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import math
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.api import bench_control  # noqa: E402
from rankflow.bench.boards.logs import one_result_per_player  # noqa: E402
from rankflow.bench.boards.results import DAY_MS, GAME, MEMORY_DAY_MS  # noqa: E402
from rankflow.bench.capacity import (Search, Step, median, oha_command, parse_oha, parse_wrk, player_regex,  # noqa: E402
                                     search_capacity, wrk_command)  # noqa: E402
from rankflow.bench.rig import cpu_seconds, cpu_times  # noqa: E402
from rankflow.produce import append_steady  # noqa: E402
from rankflow.services import LocalNginx, LocalRedis, free_port, stop_processes  # noqa: E402
from rankflow.state.signatures import canonical_bytes  # noqa: E402

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
KEY = hashlib.sha256(b"rankflow capacity benchmark").digest()
NS = "capacity"


def append_results_steady(path: str, rate: int, players: int, key: bytes, seed: int, stop: Any) -> None:
    """Append signed results of the board's players to ``path`` at ``rate`` per second, until
    ``stop`` is set: made as they are written (a pre-made log would have to be as long as the
    longest run). Played after the board's one result each, on the same day, so none is too old."""
    import random

    rng = random.Random(seed + 7)
    start_ms = MEMORY_DAY_MS + DAY_MS - 3_600_000
    digits = max(7, len(str(players - 1)))
    started = time.perf_counter()
    with open(path, "ab", buffering=0) as out:
        pending: list[bytes] = []
        i = 0
        while not stop.is_set():
            player, match = f"p{rng.randrange(players):0{digits}d}", f"t{i}"
            points, played = rng.randrange(0, 1001, 5), start_ms + i
            sig = hmac.new(key, canonical_bytes(GAME, match, player, points, played), hashlib.sha256).hexdigest()
            pending.append(orjson.dumps({"game_id": GAME, "match_id": match, "player_id": player, "points": points,
                                         "played_at": played, "received_at": played + 300, "sig": sig}) + b"\n")
            i += 1
            delay = started + i / rate - time.perf_counter()
            if delay > 0.005 or len(pending) >= 100:
                out.write(b"".join(pending))
                pending.clear()
            if delay > 0:
                time.sleep(delay)


class Server:
    """The ``rankflow serve`` under test: its pid, its base URL, its request counts. ``python``:
    another checkout's interpreter (``--base-python``), run from that checkout's root."""

    def __init__(self, redis_url: str, work: Path, python: str | None = None, name: str = "serve") -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, bench_control.ENV: "1"}
        self.stderr = open(work / f"{name}.stderr", "wb")
        command = RANKFLOW if python is None else [python, "-m", "rankflow.cli"]
        cwd = None if python is None else Path(python).absolute().parent.parent.parent  # CHECKOUT/.venv/bin/python
        self.proc = subprocess.Popen([*command, "serve", "--port", str(self.port), "--redis", redis_url,
                                      "--namespace", NS, "--board-index", "memory"], env=env, cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=self.stderr)
        self.client = httpx.Client(base_url=self.base, timeout=5)

    def wait(self, path: str, done: Callable[[httpx.Response], bool], what: str, timeout: float = 300) -> httpx.Response:
        deadline = time.monotonic() + timeout
        while True:
            try:
                r = self.client.get(path)
                if done(r):
                    return r
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"rankflow serve exited ({self.proc.returncode}): see {self.stderr.name}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.2)

    def requests(self) -> float:
        """Requests the service counted (every route and status but ``/metrics``'s own), from
        ``/metrics``: during a step only the load reaches it."""
        total = 0.0
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith("rankflow_api_requests_total{") and 'route="/metrics"' not in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def route_counts(self, route: str) -> tuple[float, float | None]:
        """``route``'s requests (every status) and those the protocol answered itself (None: a
        service without that metric, an older checkout), from ``/metrics``."""
        requests, prepared = 0.0, None
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith("rankflow_api_requests_total{") and f'route="{route}",' in line:
                requests += float(line.rsplit(" ", 1)[1])
            elif line.startswith(f'rankflow_api_prepared_answers_total{{route="{route}"}}'):
                prepared = float(line.rsplit(" ", 1)[1])
        return requests, prepared

    def health(self) -> dict[str, Any]:
        try:
            return dict(self.client.get("/health").json())
        except (httpx.HTTPError, ValueError):
            return {}

    def serves_moved(self, key: Callable[[dict[str, Any]], Any], what: str) -> None:
        """Wait until ``key(/health)`` (a snapshot id) is set and changed: a new snapshot served."""
        first = self.wait("/health", lambda r: key(r.json()) is not None, what).json()
        self.wait("/health", lambda r: key(r.json()) not in (None, key(first)), what)


class Target:
    """One thing loaded: a route of the service, directly or through nginx; ``server``: the one
    loaded when it is not the main one (``--base-python``)."""

    def __init__(self, name: str, url: str, route: str, *, regex: bool = False, via: str = "serve",
                 server: Server | None = None) -> None:
        self.name, self.url, self.route, self.regex, self.via = name, url, route, regex, via
        self.server = server


def run_step(oha: str, target: Target, rate: float, seconds: float, connections: int, server: Server,
             nginx_pids: Callable[[], list[int]]) -> Step:
    """One oha run at ``rate``: its figures, the server's CPU over it, oha's and nginx's CPU, and
    the share of the route's requests the protocol answered itself."""
    server = target.server or server
    cmd = oha_command(oha, target.url, rate, seconds, connections)
    if target.regex:
        cmd.insert(-1, "--rand-regex-url")
    pids = nginx_pids()
    served0 = server.requests() if target.via == "nginx" else 0.0
    ngx0 = nginx_cpu(pids)
    routed0 = server.route_counts(target.route)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    user0, sys0 = cpu_times(server.proc.pid)
    out = subprocess.run(cmd, capture_output=True, text=True)
    user1, sys1 = cpu_times(server.proc.pid)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"oha failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    step = parse_oha(out.stdout, rate)
    routed1 = server.route_counts(target.route)
    if routed0[1] is not None and routed1[1] is not None and routed1[0] > routed0[0]:
        step.extra["prepared_share"] = (routed1[1] - routed0[1]) / (routed1[0] - routed0[0])
    step.server_cpu_s = (user1 - user0) + (sys1 - sys0)
    step.extra["server_user_s"], step.extra["server_system_s"] = user1 - user0, sys1 - sys0
    step.extra["load_1m"] = os.getloadavg()[0]  # the machine's other work, for reading the latencies
    step.extra["oha_cpu_s"] = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    if target.via == "nginx":
        step.extra["nginx_cpu_s"] = nginx_cpu(pids) - ngx0
        served = server.requests() - served0
        step.extra["served_by_rankflow"] = served
        taken = sum(step.statuses.values()) + step.cut  # the cut ones may have reached the service too
        step.extra["answered_by_nginx_share"] = 1 - served / taken if taken else math.nan
    return step


def describe(step: Step) -> str:
    extra = ""
    if "answered_by_nginx_share" in step.extra:
        extra = (f", nginx {step.extra['nginx_cpu_s'] * 1e6 / max(1, step.answered):.0f} us/req, "
                 f"answered by nginx {step.extra['answered_by_nginx_share']:.1%}")
    return (f"offered {step.rate:>7,.0f}/s: answered {step.achieved:>7,.0f}/s, p50 {step.p50_ms:6.2f} ms, "
            f"p99 {step.p99_ms:6.2f} ms, failed {step.failed}, server {step.server_us_per_request:5.1f} us/req, "
            f"oha {step.extra['oha_cpu_s'] * 1e6 / max(1, step.answered):5.1f} us/req{extra}"
            + (f", prepared {step.extra['prepared_share']:.1%}" if "prepared_share" in step.extra else ""))


def measure_target(oha: str, target: Target, a: argparse.Namespace, server: Server,
                   nginx_pids: Callable[[], list[int]], start: float) -> tuple[Step, Search]:
    """The CPU step at ``--cpu-rate``, then the capacity search from ``start``."""
    cpu = run_step(oha, target, a.cpu_rate, a.step_s, a.connections, server, nginx_pids)
    print(f"  {target.name} (CPU step) {describe(cpu)}", flush=True)

    def measure(rate: float) -> Step:
        step = run_step(oha, target, rate, a.step_s, a.connections, server, nginx_pids)
        print(f"  {target.name} {describe(step)}", flush=True)
        return step

    search = search_capacity(measure, start, a.p99_ms, max_steps=a.max_steps, confirm=True)
    return cpu, search


def saturate(wrk: str, target: Target, a: argparse.Namespace, server: Server,
             nginx_pids: Callable[[], list[int]]) -> dict[str, Any]:
    """One closed-loop wrk step (:class:`rankflow.bench.capacity.Saturation`) with the CPU of the
    service, of nginx and of wrk per request answered."""
    pids = nginx_pids()
    served0 = server.requests()
    ngx0 = nginx_cpu(pids)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    user0, sys0 = cpu_times(server.proc.pid)
    out = subprocess.run(wrk_command(wrk, target.url, a.step_s, a.connections), capture_output=True, text=True)
    user1, sys1 = cpu_times(server.proc.pid)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"wrk failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    sat = parse_wrk(out.stdout)
    n = max(1, sat.requests)
    result = {**asdict(sat), "load_1m": os.getloadavg()[0],
              "server_us_per_request": ((user1 - user0) + (sys1 - sys0)) * 1e6 / n,
              "wrk_us_per_request": ((kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)) * 1e6 / n}
    if target.via == "nginx":
        result["nginx_us_per_request"] = (nginx_cpu(pids) - ngx0) * 1e6 / n
        result["answered_by_nginx_share"] = 1 - (server.requests() - served0) / n
    print(f"  {target.name} (wrk, closed loop) {sat.rps:,.0f} req/s, p50 {sat.p50_ms:.2f} ms, p99 {sat.p99_ms:.2f} ms, "
          f"not 2xx {sat.not_2xx}, socket errors {sat.socket_errors}; server {result['server_us_per_request']:.1f} "
          f"us/req, wrk {result['wrk_us_per_request']:.1f}"
          + (f", nginx {result['nginx_us_per_request']:.1f}, answered by nginx {result['answered_by_nginx_share']:.1%}"
             if target.via == "nginx" else ""), flush=True)
    return result


def nginx_cpu(pids: list[int]) -> float:
    """CPU seconds of nginx's ``pids`` still running: its cache loader exits a minute after the
    start, and its workers' CPU is what is measured."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except FileNotFoundError:
            pass
    return total


def x_cache(url: str, n: int = 5) -> list[str]:
    """The ``X-Cache`` header of ``n`` requests through nginx (``-`` when absent)."""
    with httpx.Client(timeout=5) as c:
        return [c.get(url).headers.get("x-cache", "-") for _ in range(n)]


def child_pids(pid: int | None) -> list[int]:
    """A process's children (nginx's workers)."""
    if pid is None:
        return []
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def ensure_oha(given: str | None) -> str:
    oha = given or shutil.which("oha") or str(Path.home() / ".cargo/bin/oha")
    if not os.access(oha, os.X_OK):
        raise SystemExit("oha is not installed: run scripts/ensure-oha.sh (make bench-capacity does)")
    return oha


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--step-s", type=float, default=5.0, help="seconds of each load step")
    p.add_argument("--p99-ms", type=float, default=5.0, help="the latency bound of the capacity")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--traffic", type=int, default=2000, help="results or playback events/s the flow follows")
    p.add_argument("--cpu-rate", type=float, default=3000, help="requests/s of the CPU step")
    p.add_argument("--players", type=int, default=50_000, help="players on the board")
    p.add_argument("--max-steps", type=int, default=8,
                   help="steps of one capacity search (a failing rate is measured twice)")
    p.add_argument("--phases", default="boards,listeners")
    p.add_argument("--start-serve", type=float, default=4000.0, help="the search's first rate, the service directly")
    p.add_argument("--start-nginx", type=float, default=8000.0, help="the search's first rate through nginx")
    p.add_argument("--via", default="serve,nginx",
                   help="serve: the service directly (and its control); nginx: through nginx; or both")
    p.add_argument("--nginx-workers", default="1")
    p.add_argument("--oha", default=None, help="the oha binary (default: on PATH, else ~/.cargo/bin/oha)")
    p.add_argument("--wrk", default=None, metavar="PATH",
                   help="also saturate each fixed URL closed-loop with wrk (Debian's) at --connections: the most "
                        "answered and its p99 (a native generator lighter than oha; 'auto': wrk on PATH)")
    p.add_argument("--base-python", metavar="PATH",
                   help="also measure a second serve run by another checkout's .venv/bin/python (the code before a "
                        "change), its steps beside this one's in the same reps")
    p.add_argument("--out", default=str(ROOT / "bench-results"))
    p.add_argument("--summarize", metavar="JSON", help="print the table of a capacity.json written before, and exit")
    a = p.parse_args()
    if a.summarize:
        summarize(json.loads(Path(a.summarize).read_text()))
        return 0
    a.via = {x for x in a.via.split(",") if x}
    if not a.via or not a.via <= {"serve", "nginx"}:
        p.error("--via: serve, nginx or both")
    phases = [x for x in a.phases.split(",") if x]
    if not phases or any(x not in ("boards", "listeners") for x in phases):
        p.error("--phases: boards, listeners or both")
    oha = ensure_oha(a.oha)
    if a.wrk == "auto":
        a.wrk = shutil.which("wrk")
    if a.wrk is not None and not os.access(a.wrk, os.X_OK):
        p.error("--wrk: no wrk there (apt-get install wrk)")
    oha_version = subprocess.run([oha, "--version"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="rankflow-capacity-"))
    rds = LocalRedis(free_port(), work / "redis").start()
    ctx = multiprocessing.get_context("spawn")
    server = Server(rds.url, work)
    base = None if a.base_python is None else Server(rds.url, work, a.base_python, "serve-base")
    nginx: LocalNginx | None = None
    results: dict[str, Any] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "command": " ".join(sys.argv),
        "oha": oha_version, "reps": a.reps, "step_s": a.step_s, "p99_limit_ms": a.p99_ms,
        "connections": a.connections, "via": sorted(a.via), "traffic_per_s": a.traffic, "cpu_rate": a.cpu_rate, "players": a.players,
        "base_python": a.base_python, "load_before": os.getloadavg(), "targets": {}}
    try:
        for one in [server] if base is None else [server, base]:
            one.wait("/livez", lambda r: r.status_code == 200, "rankflow serve to start")
            control = one.client.get(bench_control.PATH)
            assert control.status_code == 200, f"the control route is not mounted: {control.status_code}"
        if "nginx" in a.via:
            nginx = LocalNginx(free_port(), work / "nginx", server.port, workers=a.nginx_workers)
            nginx.start()
        for phase in phases:
            run_phase(phase, a, oha, work, rds.url, server, nginx, ctx, results, base)
        results["load_after"] = os.getloadavg()
        summarize(results)
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "capacity.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"wrote {out / 'capacity.json'}")
    finally:
        stop_processes([server.proc] if base is None else [server.proc, base.proc])
        if nginx is not None:
            nginx.stop()
        rds.stop()
    return 0


def run_phase(phase: str, a: argparse.Namespace, oha: str, work: Path, redis_url: str, server: Server,
              nginx: LocalNginx | None, ctx: Any, results: dict[str, Any], other: Server | None = None) -> None:
    stop = ctx.Event()
    procs: list[subprocess.Popen[bytes]] = []
    feeder = None
    try:
        if phase == "boards":
            log = work / "scores.jsonl"
            one_result_per_player(log, a.players, KEY, 1)
            procs.append(subprocess.Popen([*RANKFLOW, "run", "--flow", "boards", "--input", f"jsonl:{log}",
                                           "--redis", redis_url, "--namespace", NS, "--signing-key", KEY.hex(),
                                           "--dead-letter", f"jsonl:{work / 'scores-dl.jsonl'}"],
                                          stdout=subprocess.DEVNULL, stderr=open(work / "boards.stderr", "wb")))
            digits = max(7, len(str(a.players - 1)))
            last = f"p{a.players - 1:0{digits}d}"
            for one in [server] if other is None else [server, other]:
                one.wait(f"/boards/{GAME}/all/players/{last}", lambda r: r.status_code == 200,
                         "the board to be published")
                # a rank answers from Redis (the ASGI path) until the mirror serves: wait for it
                one.wait("/health", lambda r: _mirror_serves(r.json()), "the board mirror to serve")
            feeder = ctx.Process(target=append_results_steady, args=(str(log), a.traffic, a.players, KEY, 1, stop),
                                 daemon=True)
            # oha reads the host as it is and the path as a regex
            regex = f"http://127.0.0.1:PORT/boards/{GAME}/all/players/p{player_regex(a.players, digits)}"
            # each route as /metrics names it (FastAPI's path)
            targets = [("top", f"/boards/{GAME}/all/top?n=100", "/boards/{game:game}/{board}/top", False),
                       ("rank", regex, "/boards/{game:game}/{board}/players/{player_id:rest}", True)]
        else:
            log = work / "events.jsonl"
            log.touch()
            procs.append(subprocess.Popen([*RANKFLOW, "run", "--input", f"jsonl:{log}", "--redis", redis_url,
                                           "--namespace", NS, "--dead-letter", f"jsonl:{work / 'events-dl.jsonl'}"],
                                          stdout=subprocess.DEVNULL, stderr=open(work / "listeners.stderr", "wb")))
            feeder = ctx.Process(target=append_steady, args=(str(log), a.traffic, 50_000, 5_000, 3, stop),
                                 daemon=True)
            targets = [("rankings", "/rankings?k=100", "/rankings", False)]
        feeder.start()
        servers = [server] if other is None else [server, other]
        if phase == "listeners":
            for one in servers:
                one.wait("/rankings?k=100", lambda r: r.status_code == 200 and len(r.json().get("items", [])) >= 100,
                         "a listener ranking of 100 songs")
        for one in servers:  # the traffic reached the flow, and its snapshots the service
            one.serves_moved(_served_boards if phase == "boards" else _served_rankings,
                             "a snapshot of the traffic to be served")
        first = server.client.get(targets[0][1])  # a top: is it marked cacheable?
        results.setdefault("cacheable", {})[phase] = {h: first.headers.get(h) for h in ("cache-control", "etag")}
        chosen: list[Target] = []
        if "serve" in a.via:
            pairs = [(server, "")] if other is None else [(server, ""), (other, BASE)]
            for one, suffix in pairs:  # each base target right after this checkout's
                chosen.append(Target(f"{phase}: control{suffix}", one.base + bench_control.PATH, bench_control.PATH,
                                     server=one))
            for name, path, route, regex in targets:
                for one, suffix in pairs:
                    url = path.replace("PORT", str(one.port)) if regex else one.base + path
                    chosen.append(Target(f"{phase}: {name}{suffix}", url, route, regex=regex, server=one))
        if nginx is not None:
            for name, path, route, regex in targets:
                url = path.replace("PORT", str(nginx.port)) if regex else nginx.url + path
                chosen.append(Target(f"{phase}: {name} via nginx", url, route, regex=regex, via="nginx"))
        starts: dict[str, float] = {}
        for rep in range(a.reps):
            order = chosen[rep % len(chosen):] + chosen[:rep % len(chosen)]
            print(f"{phase}, rep {rep + 1} of {a.reps} (load {os.getloadavg()[0]:.1f})", flush=True)
            for t in order:
                pids = (lambda: child_pids(nginx.pid())) if (t.via == "nginx" and nginx is not None) else list
                start = starts.get(t.name, a.start_nginx if t.via == "nginx" else a.start_serve)
                cpu, search = measure_target(oha, t, a, server, pids, start)
                if search.best is not None:
                    starts[t.name] = search.best.rate
                entry = results["targets"].setdefault(t.name, {"url": t.url, "via": t.via, "reps": []})
                rep_result: dict[str, Any] = {"cpu_step": asdict(cpu), "search": [asdict(s) for s in search.steps],
                                              "capacity_rps": search.capacity,
                                              "capacity_offered": None if search.best is None else search.best.rate}
                if t.via == "nginx" and not t.regex:
                    rep_result["x_cache_sample"] = x_cache(t.url)
                if a.wrk and not t.regex:
                    rep_result["saturation"] = saturate(a.wrk, t, a, server, pids)
                entry["reps"].append(rep_result)
        results.setdefault("flow_problems", {})[phase] = [proc.poll() for proc in procs]
    finally:
        stop.set()
        if feeder is not None and feeder.pid is not None:
            feeder.join(10)
        stop_processes(procs)


def summarize(results: dict[str, Any]) -> None:
    """Medians over the reps per target, the application's share against its phase's control, printed."""
    targets = results["targets"]
    rows = []
    for name, t in targets.items():
        phase = name.split(":")[0]
        control = targets.get(f"{phase}: control" + (BASE if name.endswith(BASE) else ""))
        server_us = [_us(r["cpu_step"]) for r in t["reps"]]
        control_us = [_us(r["cpu_step"]) for r in control["reps"]] if control else []
        t["median"] = {
            "capacity_rps": median(r["capacity_rps"] for r in t["reps"]),
            "p99_ms_at_capacity": median(_best(r)["p99_ms"] if _best(r) else math.nan for r in t["reps"]),
            "server_us_per_request": median(server_us),
            "control_us_per_request": median(control_us) if t["via"] == "serve" else math.nan,
            # per rep (the control of the same rep), then the median
            "application_us_per_request": median(s - c for s, c in zip(server_us, control_us))
            if t["via"] == "serve" and "control" not in name else math.nan,
            "application_user_us_per_request": median(_split(s, "server_user_s") - _split(c, "server_user_s")
                                                      for s, c in zip(t["reps"], control["reps"]))
            if control and t["via"] == "serve" and "control" not in name else math.nan,
            "prepared_share": median(r["cpu_step"]["extra"].get("prepared_share", math.nan) for r in t["reps"]),
            "most_answered_rps": median(max((s["answered"] / s["seconds"] for s in r["search"] if s["seconds"]),
                                                default=math.nan) for r in t["reps"]),
            "oha_us_per_request": median(r["cpu_step"]["extra"]["oha_cpu_s"] * 1e6 / max(1, r["cpu_step"]["answered"])
                                         for r in t["reps"]),
        }
        if t["via"] == "nginx":
            t["median"]["nginx_us_per_request"] = median(
                r["cpu_step"]["extra"]["nginx_cpu_s"] * 1e6 / max(1, r["cpu_step"]["answered"]) for r in t["reps"])
            t["median"]["answered_by_nginx_share"] = median(
                _best(r)["extra"]["answered_by_nginx_share"] if _best(r) else math.nan for r in t["reps"])
        sats = [r["saturation"] for r in t["reps"] if "saturation" in r]
        if sats:
            t["median"]["wrk_rps"] = median(x["rps"] for x in sats)
            t["median"]["wrk_p99_ms"] = median(x["p99_ms"] for x in sats)
        m = t["median"]
        rows.append((name, m))
    print(f"\ncapacity at p99 <= {results['p99_limit_ms']:g} ms, {results['connections']} connections, flow "
          f"following {results['traffic_per_s']:,}/s; CPU at {results['cpu_rate']:,.0f} req/s; medians of "
          f"{results['reps']}")
    for name, m in rows:
        extra = ""
        if "nginx_us_per_request" in m:
            extra = f", nginx {m['nginx_us_per_request']:.1f} us, answered by nginx {m['answered_by_nginx_share']:.1%}"
        if "wrk_rps" in m:
            extra += f"; wrk closed loop {m['wrk_rps']:,.0f} req/s at p99 {m['wrk_p99_ms']:.2f} ms"
        print(f"{name:32} {m['capacity_rps']:>8,.0f} req/s (p99 {m['p99_ms_at_capacity']:.2f} ms; most answered "
              f"{m['most_answered_rps']:,.0f}/s at any p99); server "
              f"{m['server_us_per_request']:.1f} us/req, control {m['control_us_per_request']:.1f}, application "
              f"{m['application_us_per_request']:.1f} (user {m['application_user_us_per_request']:.1f}), "
              f"prepared {m.get('prepared_share', math.nan):.1%}{extra}")


BASE = " (base)"
"""The name's end of a target of the ``--base-python`` service."""


def _mirror_serves(health: dict[str, Any]) -> bool:
    mirror = health.get("board_mirror") or {}
    return bool(mirror.get("ready")) and mirror.get("snapshot_id") is not None


def _served_boards(health: dict[str, Any]) -> Any:
    """The boards' snapshot the mirror serves (``/health``)."""
    return (health.get("board_mirror") or {}).get("snapshot_id")


def _served_rankings(health: dict[str, Any]) -> Any:
    return health.get("snapshot_id")


def _us(step: dict[str, Any]) -> float:
    return step["server_cpu_s"] * 1e6 / step["answered"] if step["answered"] else math.nan


def _split(rep: dict[str, Any], part: str) -> float:
    """µs per request of the CPU step's ``server_user_s`` or ``server_system_s``."""
    step = rep["cpu_step"]
    return step["extra"].get(part, math.nan) * 1e6 / step["answered"] if step["answered"] else math.nan


def _best(rep: dict[str, Any]) -> dict[str, Any] | None:
    """The passing step at the capacity's offered rate (a failing rate is measured twice)."""
    offered = rep["capacity_offered"]
    return min((s for s in rep["search"] if s["rate"] == offered), key=lambda s: s["p99_ms"], default=None)


if __name__ == "__main__":
    sys.exit(main())
